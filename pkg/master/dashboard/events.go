package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// keepaliveEvery is how often an idle event stream sends a comment, so proxies
// and the browser keep the connection open.
const keepaliveEvery = 20 * time.Second

// taskJSON is a task as the page's script reads it (from an event or an
// enqueue answer); the script writes every field with textContent. Detail is
// the result cell's text (taskResult: an export's progress while it runs).
type taskJSON struct {
	ID         string          `json:"id"`
	Kind       string          `json:"kind"`
	Target     registry.Target `json:"target"` // its text
	State      string          `json:"state"`
	Error      string          `json:"error,omitempty"`
	Detail     string          `json:"detail,omitempty"`
	EnqueuedAt string          `json:"enqueued_at,omitempty"`
	StartedAt  string          `json:"started_at,omitempty"`
	FinishedAt string          `json:"finished_at,omitempty"`
	Deleted    bool            `json:"deleted,omitempty"`
}

func taskJSONOf(t *tidemarkv1.Task) taskJSON {
	// The AdminService's answer is where the target's text enters; it answers only
	// tasks of valid targets.
	target, _ := registry.ParseTarget(t.GetTarget())
	return taskJSON{
		ID: t.GetId(), Kind: t.GetKind(), Target: target, State: t.GetState(), Error: t.GetError(), Detail: taskResult(t),
		EnqueuedAt: jsonTime(protoTime(t.GetEnqueuedAt())), StartedAt: jsonTime(protoTime(t.GetStartedAt())),
		FinishedAt: jsonTime(protoTime(t.GetFinishedAt())),
	}
}

func taskJSONFromStore(t tasks.Task, deleted bool) taskJSON {
	return taskJSON{
		ID: t.ID, Kind: string(t.Kind), Target: t.Target, State: string(t.State), Error: t.Error, Detail: storeTaskResult(t),
		EnqueuedAt: jsonTime(t.EnqueuedAt), StartedAt: jsonTime(t.StartedAt), FinishedAt: jsonTime(t.FinishedAt), Deleted: deleted,
	}
}

func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return formatTime(t)
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// events streams task changes as server-sent events ("event: task", data a
// taskJSON), fed by the etcd watch on P/tasks/, optionally only those of one
// target (?target=). The stream ends when the browser goes away, the master
// stops, or the browser falls too far behind (it reconnects on its own).
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request, _ session) {
	var target registry.Target
	text := r.URL.Query().Get("target")
	if text != "" {
		target, _ = registry.ParseTarget(text) // an invalid one (zero) matches no task
	}
	rc := http.NewResponseController(w)
	// The server's write timeout is for ordinary answers; a stream lives longer.
	_ = rc.SetWriteDeadline(time.Time{})
	ch, cancel := d.feed.subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A first comment tells the script the stream is open.
	_, _ = fmt.Fprint(w, ": open\nretry: 2000\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			_, _ = fmt.Fprint(w, ": keepalive\n\n")
		case e, ok := <-ch:
			if !ok {
				return
			}
			if text != "" && e.Task.Target != target {
				continue
			}
			data, err := json.Marshal(taskJSONFromStore(e.Task, e.Deleted))
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(w, "event: task\ndata: %s\n\n", data)
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
