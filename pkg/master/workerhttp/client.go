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
//
// Its job is choosing the worker; every request, the blob download included
// (pkg/client's OpenBlob hands the body over unread), goes through pkg/client,
// which builds the routes and reads the answers (bounded, typed errors).
package workerhttp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/client"
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
	ErrUndecodable = client.ErrUndecodable
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

// Client reads from the workers' HTTP data API through pkg/client. It is safe
// for concurrent use.
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

// Kind is the data API's kind of a store of the registry.
func Kind(kind registry.Kind) client.Kind {
	if kind == registry.KindRollout {
		return client.Rollouts
	}
	return client.Generic
}

// RowsField is the field of a rows answer that holds the rows: a rollout
// store's "records", a generic store's "rows".
func RowsField(kind registry.Kind) string { return Kind(kind).RowsKey() }

// Store describes the store kind/name (its version and counts) through a live
// worker, and returns the worker that answered.
func (c *Client) Store(ctx context.Context, kind registry.Kind, name string) (client.Store, string, error) {
	var s client.Store
	worker, err := c.ask(ctx, func(ctx context.Context, wc *client.Client) (err error) {
		s, err = wc.GetStore(ctx, Kind(kind), name)
		return err
	})
	return s, worker, err
}

// Rows lists rows of the store kind/name through a live worker.
func (c *Client) Rows(ctx context.Context, kind registry.Kind, name string, opts client.ListOptions) (client.Page, string, error) {
	var p client.Page
	worker, err := c.ask(ctx, func(ctx context.Context, wc *client.Client) (err error) {
		p, err = wc.ListRows(ctx, Kind(kind), name, opts)
		return err
	})
	return p, worker, err
}

// Row reads the row id of the store kind/name through a live worker (nil for
// an absent rollout record, as the worker answers it).
func (c *Client) Row(ctx context.Context, kind registry.Kind, name, id string, opts client.ReadOptions) (json.RawMessage, string, error) {
	var row json.RawMessage
	worker, err := c.ask(ctx, func(ctx context.Context, wc *client.Client) (err error) {
		row, err = wc.GetRow(ctx, Kind(kind), name, id, opts)
		return err
	})
	return row, worker, err
}

// OpenBlob opens the blob of the record id of the rollout store name through a
// live worker, its body unread (a download to stream), which the caller closes;
// the read of the body is bounded by Timeout too. It returns the body's length
// (-1: unknown).
func (c *Client) OpenBlob(ctx context.Context, name, id string) (io.ReadCloser, int64, string, error) {
	var body io.ReadCloser
	var size int64
	worker, err := c.ask(ctx, func(ctx context.Context, wc *client.Client) (err error) {
		body, size, err = wc.OpenBlob(ctx, name, id)
		return err
	})
	return body, size, worker, err
}

// ask calls each live worker with an HTTP address in instance order, each
// within Timeout, until one answers: the answer (a success or an error answer)
// is the call's. A worker that did not answer (no connection, no answer within
// Timeout, an answer cut off) is passed over for the next. It returns the worker
// whose answer was taken, and its error as an *AnswerError, ErrTooLarge or
// ErrUndecodable.
func (c *Client) ask(ctx context.Context, call func(context.Context, *client.Client) error) (string, error) {
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
		wc, err := client.New(c.scheme+"://"+w.HTTPAddr, client.WithHTTPClient(c.http),
			client.WithTimeout(c.cfg.Timeout), client.WithMaxAnswer(c.cfg.MaxAnswer))
		if err != nil {
			return w.InstanceID, fmt.Errorf("worker %s: %w", w.InstanceID, err)
		}
		err = call(ctx, wc)
		if answered(err) || ctx.Err() != nil {
			return w.InstanceID, c.answerError(err, w.InstanceID)
		}
		err = fmt.Errorf("worker %s: %w", w.InstanceID, err)
		c.cfg.Logger.Warn("worker data API not reachable; asking the next worker", "worker", w.InstanceID, "addr", w.HTTPAddr, "err", err)
		failed = append(failed, err.Error())
	}
	return "", fmt.Errorf("%w: no worker answered: %s", ErrUnreachable, strings.Join(failed, "; "))
}

// answered reports whether err (of a call through pkg/client) says the worker
// answered: no error, an error answer, or an answer refused as too large or
// undecodable.
func answered(err error) bool {
	var ae *client.Error
	return err == nil || errors.As(err, &ae) || errors.Is(err, client.ErrTooLarge) || errors.Is(err, client.ErrUndecodable)
}

// answerError is the error of worker's answer in this package's terms.
func (c *Client) answerError(err error, worker string) error {
	var ae *client.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return &AnswerError{Worker: worker, Status: ae.Status, Code: ae.Code, Message: ae.Message}
	case errors.Is(err, client.ErrTooLarge):
		return fmt.Errorf("worker %s: %w: over %d MiB; ask for fewer records (limit)", worker, ErrTooLarge, c.cfg.MaxAnswer>>20)
	}
	return fmt.Errorf("worker %s: %w", worker, err)
}
