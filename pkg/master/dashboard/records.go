package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Record browser limits.
const (
	recordsPerPage = 25
	// blobColumn is the rollout column the download link serves.
	blobColumn = schema.BinaryPayloadColumn
	// payloadSizeColumn, when set, marks a record with a blob to download.
	payloadSizeColumn = schema.PayloadSizeColumn
)

// rolloutColumns are the columns the record table shows for a rollout store; the
// full record is one click away.
var rolloutColumns = []string{"id", "rollout_id", "dataset", "sequence_order", "role", "created_at", "content", "reward"}

// maxGenericColumns bounds the columns the table shows for a generic store.
const maxGenericColumns = 8

type recordRow struct {
	ID    string
	Cells []cell
	JSON  string
	Blob  bool
}

type recordsPage struct {
	Kind       string
	Columns    []string
	Rows       []recordRow
	Offset     int
	Prev, Next int
	HasPrev    bool
	HasNext    bool
	Filters    []filterInput
	Filterable bool
	Worker     string
	Error      string
}

type filterInput struct{ Key, Value string }

// cell is one value of the record table; a timestamp is kept on one line.
type cell struct {
	Text string
	Time bool
}

// records reads one page of target's records through a worker.
func (d *Dashboard) records(ctx context.Context, r *http.Request, target registry.Target) recordsPage {
	kind, name := target.Kind, target.Name
	q := r.URL.Query()
	p := recordsPage{Kind: string(kind), Filterable: kind == registry.KindRollout}
	p.Offset, _ = strconv.Atoi(q.Get("offset"))
	p.Offset = max(p.Offset, 0)
	filters := map[string]any{}
	if p.Filterable {
		for _, k := range schema.RolloutFilterKeys() {
			v := strings.TrimSpace(q.Get("f." + k))
			p.Filters = append(p.Filters, filterInput{Key: k, Value: v})
			switch {
			case v == "":
			case k == "include_in_training":
				b, err := strconv.ParseBool(v)
				if err != nil {
					p.Error = fmt.Sprintf("filter include_in_training: %q is not true or false", v)
					return p
				}
				filters[k] = b
			default:
				filters[k] = v
			}
		}
	}
	page, worker, err := d.cfg.Workers.Rows(ctx, kind, name, client.ListOptions{Limit: recordsPerPage + 1, Offset: p.Offset, Filters: filters})
	p.Worker = worker
	if err != nil {
		p.Error = err.Error()
		return p
	}
	rows := page.Rows
	if len(rows) > recordsPerPage {
		rows, p.HasNext, p.Next = rows[:recordsPerPage], true, p.Offset+recordsPerPage
	}
	p.HasPrev, p.Prev = p.Offset > 0, max(p.Offset-recordsPerPage, 0)
	for _, raw := range rows {
		keys, values, err := orderedObject(raw)
		if err != nil {
			p.Error = fmt.Sprintf("worker %s: a row does not decode: %v", worker, err)
			return p
		}
		if p.Columns == nil {
			p.Columns = rolloutColumns
			if kind != registry.KindRollout {
				p.Columns = keys[:min(len(keys), maxGenericColumns)]
			}
		}
		row := recordRow{}
		for _, c := range p.Columns {
			text, isTime := cellText(values[c])
			row.Cells = append(row.Cells, cell{Text: truncate(80, text), Time: isTime})
		}
		row.ID, _ = values["id"].(string)
		// Lists leave binary_payload out; payload_size says a record has one
		// (a worker from before blobs listed the bytes themselves).
		if _, sized := values[payloadSizeColumn].(json.Number); kind == registry.KindRollout && sized {
			row.Blob = true
		} else if b, ok := values[blobColumn].(string); ok && b != "" && kind == registry.KindRollout {
			row.Blob = true
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, raw, "", "  ")
		row.JSON = pretty.String()
		p.Rows = append(p.Rows, row)
	}
	return p
}

// orderedObject decodes a JSON object, keeping its key order (a generic store's
// columns come in schema order).
func orderedObject(raw []byte) ([]string, map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	var keys []string
	values := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		values[k] = v
	}
	return keys, values, nil
}

// cellText is a value as one table cell shows it, and whether it is a
// timestamp (shown to the second).
func cellText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return formatTime(t), true
		}
		return x, false
	case json.Number:
		return x.String(), false
	case bool:
		return strconv.FormatBool(x), false
	}
	b, _ := json.Marshal(v)
	return string(b), false
}

// blob serves a rollout record's binary_payload as a download, streamed from
// the worker's blob route (lists leave the bytes out).
func (d *Dashboard) blob(w http.ResponseWriter, r *http.Request, sess session) {
	text, id := r.PathValue("target"), r.PathValue("id")
	target, err := registry.ParseTarget(text)
	kind, name := target.Kind, target.Name
	if err != nil || kind != registry.KindRollout {
		d.fail(w, r, sess, http.StatusBadRequest, fmt.Errorf("%q: blob downloads are for rollout stores' %s", text, blobColumn))
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	body, size, _, err := d.cfg.Workers.OpenBlob(ctx, name, id)
	var answered *workerhttp.AnswerError
	switch {
	case errors.As(err, &answered) && answered.Status == http.StatusNotFound:
		d.fail(w, r, sess, http.StatusNotFound, fmt.Errorf("record %q of %s has no %s", id, target, blobColumn))
		return
	case err != nil:
		d.fail(w, r, sess, http.StatusBadGateway, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", safeFilename(id)+".bin"))
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	_, _ = io.Copy(w, body)
}

// safeFilename keeps a record id's letters, digits and ._- for a download name.
func safeFilename(id string) string {
	out := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-", r) {
			return r
		}
		return '_'
	}, id)
	if out == "" {
		return "record"
	}
	return out
}
