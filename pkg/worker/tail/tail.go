package tail

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
)

// Defaults of Config.
const (
	DefaultLimit = 100
	DefaultWait  = 30 * time.Second
	// commitTimeout bounds a commit, which runs even after the context ended:
	// the page it commits was written.
	commitTimeout = 10 * time.Second
	// maxAnswerBytes bounds an error answer read into a message.
	maxAnswerBytes = 64 << 10
)

// retry is the delay policy between attempts when a worker is unavailable while
// following.
var retry = backoff.Policy{Min: 200 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}

// Config is what to follow and how.
type Config struct {
	// URL is the worker's HTTP address (http://host:port).
	URL string
	// Kind is the store's path segment, "rollouts" or "generic"; Name its name.
	Kind, Name string
	// Consumer, if set, starts from the consumer's committed cursor (unless
	// Cursor is given) and commits each page's next_cursor after writing it.
	Consumer string
	// Cursor is where to start: "" from the consumer's committed cursor, or from
	// the beginning without Consumer; "now" from the current end.
	Cursor string
	// Follow keeps reading at the end of the feed, long-polling with Wait.
	Follow bool
	Wait   time.Duration
	// Limit is the page size (DefaultLimit when zero).
	Limit int
	// Client sends the requests (http.DefaultClient when nil).
	Client *http.Client
	// Out receives the rows, one JSON object a line.
	Out io.Writer
	// Logger reports commits refused and retries (discarded when nil).
	Logger *slog.Logger
	// Clock times retries (the real clock when nil).
	Clock clock.Clock
}

// Stats is what a Run did.
type Stats struct {
	Pages, Rows, Commits int
	// Cursor is the next_cursor of the last page read: where a next run
	// would start.
	Cursor string
}

// ErrRequest is a request the worker refused for good (a 4xx other than a
// commit behind): a wrong store, consumer or cursor. The message is the worker's.
var ErrRequest = errors.New("worker refused the request")

// page is the changes route's answer.
type page struct {
	Changes []struct {
		Cursor string          `json:"cursor"`
		Row    json.RawMessage `json:"row"`
	} `json:"changes"`
	NextCursor string `json:"next_cursor"`
}

// Run follows the feed until its end (without Follow) or until ctx ends; an end
// of ctx is a clean end (nil error).
func Run(ctx context.Context, cfg Config) (Stats, error) {
	if cfg.Kind != "rollouts" && cfg.Kind != "generic" {
		return Stats{}, fmt.Errorf("store kind %q: want rollouts or generic", cfg.Kind)
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	base, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return Stats{}, fmt.Errorf("worker URL %q: want http://host:port", cfg.URL)
	}
	t := &tailer{cfg: cfg, base: base, out: bufio.NewWriter(cfg.Out)}
	err = t.run(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		err = nil // SIGINT, SIGTERM: the end the user asked for
	}
	return t.stats, err
}

type tailer struct {
	cfg       Config
	base      *url.URL
	out       *bufio.Writer
	stats     Stats
	committed string // the cursor last committed (or found committed)
}

func (t *tailer) run(ctx context.Context) error {
	cursor := t.cfg.Cursor
	wait := retry.Start()
	for {
		p, err := t.read(ctx, cursor)
		if err != nil {
			if !t.cfg.Follow || errors.Is(err, ErrRequest) || ctx.Err() != nil {
				return err
			}
			d := wait.Next()
			t.cfg.Logger.Warn("tail: page not read; trying again", "err", err, "retry_in", d.String())
			if err := backoff.Sleep(ctx, t.cfg.Clock, d); err != nil {
				return err
			}
			continue
		}
		wait.Reset()
		t.stats.Pages++
		for _, c := range p.Changes {
			var line bytes.Buffer
			if err := json.Compact(&line, c.Row); err != nil {
				return fmt.Errorf("change at %s: row is not JSON: %w", c.Cursor, err)
			}
			line.WriteByte('\n')
			if _, err := t.out.Write(line.Bytes()); err != nil {
				return err
			}
		}
		if err := t.out.Flush(); err != nil {
			return err
		}
		t.stats.Rows += len(p.Changes)
		if p.NextCursor == "" {
			return fmt.Errorf("the worker answered a page without next_cursor (after cursor %q)", cursor)
		}
		cursor, t.stats.Cursor = p.NextCursor, p.NextCursor
		if t.cfg.Consumer != "" && cursor != t.committed {
			if err := t.commit(ctx, cursor); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !t.cfg.Follow && len(p.Changes) < t.cfg.Limit {
			return nil // the end of the feed, as of its horizon
		}
	}
}

// read gets the page after cursor ("" : the consumer's committed cursor, or the
// beginning).
func (t *tailer) read(ctx context.Context, cursor string) (page, error) {
	q := url.Values{"limit": {strconv.Itoa(t.cfg.Limit)}}
	switch {
	case cursor != "":
		q.Set("cursor", cursor)
	case t.cfg.Consumer != "":
		q.Set("consumer", t.cfg.Consumer)
	}
	if t.cfg.Follow {
		q.Set("wait", t.cfg.Wait.String())
	}
	u := t.base.JoinPath("api/v1", t.cfg.Kind, t.cfg.Name, "changes")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return page{}, err
	}
	var p page
	if err := t.do(req, &p); err != nil {
		return page{}, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	return p, nil
}

// commit commits cursor for the consumer. It runs past the end of ctx (bounded
// by commitTimeout): the page it commits was written. A commit behind the
// committed cursor is logged and passed over: another instance got further, and
// its cursor stands.
func (t *tailer) commit(ctx context.Context, cursor string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	u := t.base.JoinPath("api/v1/consumers", t.cfg.Consumer, t.cfg.Kind, t.cfg.Name, "commit")
	body, _ := json.Marshal(map[string]string{"cursor": cursor})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	err = t.do(req, nil)
	var refused *refusal
	switch {
	case errors.As(err, &refused) && refused.code == "CURSOR_BEHIND":
		t.cfg.Logger.Warn("tail: commit refused, another instance of the consumer is further; its cursor stays",
			"consumer", t.cfg.Consumer, "message", refused.message)
	case err != nil:
		return fmt.Errorf("commit consumer %q's cursor: %w", t.cfg.Consumer, err)
	default:
		t.stats.Commits++
	}
	t.committed = cursor
	return nil
}

// refusal is an error answer of the worker.
type refusal struct {
	status        int
	code, message string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%d %s: %s", r.status, r.code, r.message)
}

// Unwrap makes a client error (4xx) ErrRequest: sending it again cannot help.
func (r *refusal) Unwrap() error {
	if r.status >= 400 && r.status < 500 {
		return ErrRequest
	}
	return nil
}

// do sends req and decodes a 200 answer into v (if not nil); any other answer
// is a *refusal with the worker's code and message.
func (t *tailer) do(req *http.Request, v any) error {
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &eb) != nil || eb.Error.Code == "" {
			eb.Error.Message = strings.TrimSpace(string(raw))
		}
		return &refusal{status: resp.StatusCode, code: eb.Error.Code, message: eb.Error.Message}
	}
	if v == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}
