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
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/pkg/client"
)

// Defaults of Config.
const (
	DefaultLimit = 100
	DefaultWait  = 30 * time.Second
	// commitTimeout bounds a commit, which runs even after the context ended:
	// the page it commits was written.
	commitTimeout = 10 * time.Second
)

// retry is the delay policy between attempts when a worker is unavailable while
// following.
var retry = backoff.Policy{Min: 200 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}

// Config is what to follow and how.
type Config struct {
	// Worker is the client of the worker to read from. Required.
	Worker *client.Client
	// Kind is the store's kind; Name its name.
	Kind client.Kind
	Name string
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

// refused makes a client error answer (4xx) ErrRequest: sending it again
// cannot help.
func refused(err error) error {
	var e *client.Error
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
		return fmt.Errorf("%w: %w", ErrRequest, err)
	}
	return err
}

// Run follows the feed until its end (without Follow) or until ctx ends; an end
// of ctx is a clean end (nil error).
func Run(ctx context.Context, cfg Config) (Stats, error) {
	if _, err := client.ParseKind(string(cfg.Kind)); err != nil {
		return Stats{}, fmt.Errorf("store kind %q: want rollouts or generic", cfg.Kind)
	}
	if cfg.Worker == nil {
		return Stats{}, errors.New("tail: no worker client")
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	t := &tailer{cfg: cfg, out: bufio.NewWriter(cfg.Out)}
	err := t.run(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		err = nil // SIGINT, SIGTERM: the end the user asked for
	}
	return t.stats, err
}

type tailer struct {
	cfg       Config
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
func (t *tailer) read(ctx context.Context, cursor string) (client.ChangesPage, error) {
	opts := client.ChangesOptions{Cursor: cursor, Consumer: t.cfg.Consumer, Limit: t.cfg.Limit}
	if t.cfg.Follow {
		opts.Wait = t.cfg.Wait
	}
	p, err := t.cfg.Worker.Changes(ctx, t.cfg.Kind, t.cfg.Name, opts)
	if err != nil {
		return p, fmt.Errorf("%s: %w", t.cfg.Worker.URL(), refused(err))
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
	_, err := t.cfg.Worker.CommitConsumer(ctx, t.cfg.Consumer, t.cfg.Kind, t.cfg.Name, cursor)
	var e *client.Error
	switch {
	case errors.Is(err, client.ErrCursorBehind) && errors.As(err, &e):
		t.cfg.Logger.Warn("tail: commit refused, another instance of the consumer is further; its cursor stays",
			"consumer", t.cfg.Consumer, "message", e.Message)
	case err != nil:
		return fmt.Errorf("commit consumer %q's cursor: %w", t.cfg.Consumer, refused(err))
	default:
		t.stats.Commits++
	}
	t.committed = cursor
	return nil
}
