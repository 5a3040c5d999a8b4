// Package workerhttp is the master's client of the workers' HTTP data API: the
// HTTP API's record routes and the dashboard's record browser and blob downloads
// read a store's rows through it, with the master's outgoing credential.
//
// Invariants:
//
//   - A read goes to a live worker with an HTTP address, in instance order; one
//     that cannot be reached (no connection, no answer within Timeout) is passed
//     over for the next. A worker that answered is never asked again: its answer,
//     an error answer included, is the read's.
//   - What the master holds of an answer is bounded (MaxAnswer); a larger one is
//     refused, never cut short and decoded.
//   - Every request carries the credential (Token, and TLS's client certificate).
package workerhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one worker's answer, so a hung worker leaves time to
	// ask the next.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxAnswer bounds the bytes of one answer the master holds.
	DefaultMaxAnswer = 64 << 20
)

var (
	// ErrNoWorker means no live worker has an HTTP address to read through
	// (none running, or a static WORKER_ENDPOINTS list, which has none).
	ErrNoWorker = errclass.New(errclass.Unavailable,
		"no worker with an HTTP address is registered: records are read through a worker's data API")
	// ErrUnreachable means every worker asked failed before answering.
	ErrUnreachable = errclass.New(errclass.Unavailable, "workers unreachable")
	// ErrTooLarge refuses an answer larger than MaxAnswer.
	ErrTooLarge = errclass.New(errclass.Invalid, "the worker's answer is too large")
	// ErrUndecodable marks a 200 answer that is not the JSON asked for.
	ErrUndecodable = errors.New("answer does not decode")
)

// AnswerError is a worker's answer other than 200, with the code and message of
// its {"error":{"code","message"}} body (the body itself when it has none).
type AnswerError struct {
	Worker  string
	Status  int
	Code    string
	Message string
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("worker %s answered %d %s: %s", e.Worker, e.Status, http.StatusText(e.Status), e.Message)
}

// Config configures a Client.
type Config struct {
	// Discovery lists the workers. Required.
	Discovery fanout.Discovery
	// Token and TLS are the master's outgoing credential (TLS nil: plain HTTP).
	Token string
	TLS   *tls.Config
	// Timeout bounds one worker's answer (DefaultTimeout), MaxAnswer the bytes
	// of one answer held (DefaultMaxAnswer).
	Timeout   time.Duration
	MaxAnswer int64
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// Client reads from the workers' HTTP data API. It is safe for concurrent use.
type Client struct {
	cfg    Config
	http   *http.Client
	scheme string
}

// New returns the client of cfg.
func New(cfg Config) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAnswer <= 0 {
		cfg.MaxAnswer = DefaultMaxAnswer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	return &Client{cfg: cfg, http: auth.HTTPClient(cfg.Token, cfg.TLS), scheme: scheme}
}

// Get GETs path (with its query) from a live worker and decodes its 200 answer,
// at most MaxAnswer bytes of JSON, into v. It returns the worker that answered.
// Another answer is an *AnswerError; an undecodable one wraps ErrUndecodable, a
// larger one ErrTooLarge.
func (c *Client) Get(ctx context.Context, path string, v any) (string, error) {
	var body []byte
	worker, err := c.ask(ctx, path, func(resp *http.Response, worker string) (bool, error) {
		defer resp.Body.Close()
		var err error
		if body, err = io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxAnswer+1)); err != nil {
			return false, fmt.Errorf("worker %s: %w", worker, err) // cut off: as if it never answered
		}
		if int64(len(body)) > c.cfg.MaxAnswer {
			return true, fmt.Errorf("worker %s: %w: over %d MiB; ask for fewer records (limit)", worker, ErrTooLarge, c.cfg.MaxAnswer>>20)
		}
		return true, nil
	})
	if err != nil {
		return worker, err
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(v); err != nil {
		return worker, fmt.Errorf("worker %s: %w: %v", worker, ErrUndecodable, err)
	}
	return worker, nil
}

// Open GETs path from a live worker and returns its 200 answer with the body
// unread (a download to stream), which the caller closes; the read of the body is
// bounded by Timeout too. Another answer is an *AnswerError.
func (c *Client) Open(ctx context.Context, path string) (*http.Response, string, error) {
	var open *http.Response
	worker, err := c.ask(ctx, path, func(resp *http.Response, _ string) (bool, error) {
		open = resp
		return true, nil
	})
	return open, worker, err
}

// ask GETs path from each live worker with an HTTP address in instance order,
// each within Timeout, until one answers: a 200 answer goes to take, which
// returns whether it is the read's (false: the worker failed to answer after
// all, and the next is asked), another answer is an *AnswerError. It returns the
// worker whose answer was taken.
func (c *Client) ask(ctx context.Context, path string, take func(*http.Response, string) (bool, error)) (string, error) {
	workers, err := c.cfg.Discovery.Workers(ctx)
	if err != nil {
		return "", fmt.Errorf("discover workers: %w", err)
	}
	workers = slices.DeleteFunc(slices.Clone(workers), func(w fanout.Worker) bool { return w.HTTPAddr == "" })
	if len(workers) == 0 {
		return "", ErrNoWorker
	}
	slices.SortFunc(workers, func(x, y fanout.Worker) int { return strings.Compare(x.InstanceID, y.InstanceID) })
	var failed []string
	for _, w := range workers {
		taken, err := c.askOne(ctx, w, path, take)
		if taken || ctx.Err() != nil {
			return w.InstanceID, err
		}
		c.cfg.Logger.Warn("worker data API not reachable; asking the next worker", "worker", w.InstanceID, "addr", w.HTTPAddr, "err", err)
		failed = append(failed, err.Error())
	}
	return "", fmt.Errorf("%w: no worker answered: %s", ErrUnreachable, strings.Join(failed, "; "))
}

// askOne GETs path from w within Timeout; taken says whether w answered.
func (c *Client) askOne(ctx context.Context, w fanout.Worker, path string, take func(*http.Response, string) (bool, error)) (taken bool, _ error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+w.HTTPAddr+path, nil)
	if err != nil {
		cancel()
		return true, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		return false, fmt.Errorf("worker %s: %w", w.InstanceID, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		return true, c.answerError(resp, w.InstanceID)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	taken, err = take(resp, w.InstanceID)
	if !taken {
		resp.Body.Close()
	}
	return taken, err
}

// answerError reads a worker's error answer (resp's body, which it closes).
func (c *Client) answerError(resp *http.Response, worker string) *AnswerError {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxAnswer))
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if e.Error.Message == "" {
		e.Error.Message = strings.TrimSpace(string(body))
	}
	return &AnswerError{Worker: worker, Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// StorePath is the route of a store on a worker.
func StorePath(kind registry.Kind, name string) string {
	if kind == registry.KindRollout {
		return "/api/v1/rollouts/" + url.PathEscape(name)
	}
	return "/api/v1/generic/" + url.PathEscape(name)
}

// RowsPath is the route of a store's rows on a worker.
func RowsPath(kind registry.Kind, name string) string {
	return StorePath(kind, name) + "/" + RowsField(kind)
}

// RowsField is the field of a rows answer that holds the rows: a rollout
// store's "records", a generic store's "rows".
func RowsField(kind registry.Kind) string {
	if kind == registry.KindRollout {
		return "records"
	}
	return "rows"
}
