package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// Error codes of the consumer routes.
const (
	// CodeCursorBehind (409): a commit's cursor is before the consumer's committed
	// cursor, which the message names; the committed cursor stays. Another
	// instance of the consumer got further: resume from the committed cursor.
	CodeCursorBehind = "CURSOR_BEHIND"
	// CodeConsumersUnavailable (503): the worker has no etcd to keep consumers'
	// cursors in, or etcd failed the request.
	CodeConsumersUnavailable = "CONSUMERS_UNAVAILABLE"
)

// errNoConsumers answers a consumer route on a worker without etcd.
var errNoConsumers = &apiError{status: http.StatusServiceUnavailable, code: CodeConsumersUnavailable,
	message: "named consumers keep their cursors in etcd, and this worker has none (ETCD_ENDPOINTS)"}

// consumerAnswer is the body of the consumer routes' 200 answers.
type consumerAnswer struct {
	Consumer    string    `json:"consumer"`
	Store       string    `json:"store"`
	Cursor      string    `json:"cursor"`
	CommittedAt time.Time `json:"committed_at"`
}

// commitRequest is the body of POST .../commit: the next_cursor of the last
// page the consumer processed.
type commitRequest struct {
	Cursor string `json:"cursor"`
}

// registerConsumerRoutes adds the named consumers' routes: commit a cursor, read
// it back. {kind} is the data API's path segment of the store's kind.
func (s *Server) registerConsumerRoutes(mux *http.ServeMux) {
	const base = "/api/v1/consumers/{consumer}/{kind}/{name}"
	mux.Handle("POST "+base+"/commit", s.data(s.api(s.commitConsumer)))
	mux.Handle("GET "+base, s.data(s.api(s.getConsumer)))
}

// consumerPath is what a consumer route's path names.
type consumerPath struct {
	consumer string
	kind     registry.Kind
	name     string
}

func (p consumerPath) target() registry.Target { return registry.NewTarget(p.kind, p.name) }

// parseConsumerPath validates the path of a consumer route: 400 for a bad
// consumer, kind or store name.
func parseConsumerPath(r *http.Request) (consumerPath, error) {
	p := consumerPath{consumer: r.PathValue("consumer")}
	switch seg := r.PathValue("kind"); seg {
	case "rollouts":
		p.kind = registry.KindRollout
	case "generic":
		p.kind = registry.KindGeneric
	default:
		return p, badRequest("store kind %q in the path: want rollouts or generic", seg)
	}
	if err := consumers.ValidateName(p.consumer); err != nil {
		return p, err
	}
	name, err := pathName(r)
	p.name = name
	return p, err
}

// consumerStore checks the route's store exists (404 in the reference's words
// when it does not), and that this worker keeps consumers (503 when not).
func (s *Server) consumerStore(r *http.Request) (consumerPath, error) {
	p, err := parseConsumerPath(r)
	if err != nil {
		return p, err
	}
	if s.cfg.Consumers == nil {
		return p, errNoConsumers
	}
	if _, err := s.cfg.Stores.Registry().Get(r.Context(), p.kind, p.name); err != nil {
		return p, referenceWording(p.kind, p.name, err)
	}
	return p, nil
}

// commitConsumer is POST /api/v1/consumers/{consumer}/{kind}/{name}/commit: it
// moves the consumer's committed cursor forward (200, the record as stored; an
// equal cursor is a 200 that changes nothing), or answers 409 naming the
// committed cursor when the commit is behind it.
func (s *Server) commitConsumer(w http.ResponseWriter, r *http.Request) error {
	p, err := s.consumerStore(r)
	if err != nil {
		return err
	}
	var req commitRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if req.Cursor == "" {
		return badRequest(`missing "cursor": commit the next_cursor of the last page processed`)
	}
	cursor, err := rowkey.ParseCursor(req.Cursor)
	if err != nil {
		return badRequest("cursor: %v", err)
	}
	ctx, cancel := detached(r)
	defer cancel()
	rec, err := s.cfg.Consumers.Commit(ctx, p.target(), p.consumer, cursor)
	var behind *consumers.BehindError
	if errors.As(err, &behind) {
		return &apiError{status: http.StatusConflict, code: CodeCursorBehind, message: fmt.Sprintf(
			"cursor %s is behind consumer %q's committed cursor %s (committed at %s); the committed cursor stays",
			req.Cursor, p.consumer, behind.Committed.Cursor.Cursor(), behind.Committed.CommittedAt.Format(time.RFC3339Nano))}
	}
	if err != nil {
		return consumersFailed(err, "commit of consumer %q's cursor in %s store %q failed", p.consumer, p.kind, p.name)
	}
	s.cfg.Logger.Debug("consumer cursor committed", "store", p.name, "kind", p.kind, "consumer", p.consumer, "cursor", req.Cursor)
	httpjson.WriteJSON(w, http.StatusOK, consumerAnswerOf(p, rec))
	return nil
}

// getConsumer is GET /api/v1/consumers/{consumer}/{kind}/{name}: the committed
// cursor, or 404 when the consumer never committed one in the store.
func (s *Server) getConsumer(w http.ResponseWriter, r *http.Request) error {
	p, err := s.consumerStore(r)
	if err != nil {
		return err
	}
	rec, err := s.cfg.Consumers.Get(r.Context(), p.target(), p.consumer)
	if errors.Is(err, consumers.ErrNotFound) {
		return notFound("consumer %q has no committed cursor in %s store %q", p.consumer, p.kind, p.name)
	}
	if err != nil {
		return consumersFailed(err, "read of consumer %q's cursor in %s store %q failed", p.consumer, p.kind, p.name)
	}
	httpjson.WriteJSON(w, http.StatusOK, consumerAnswerOf(p, rec))
	return nil
}

func consumerAnswerOf(p consumerPath, rec consumers.Record) consumerAnswer {
	return consumerAnswer{Consumer: p.consumer, Store: p.name, Cursor: rec.Cursor.Cursor(), CommittedAt: rec.CommittedAt}
}

// consumersFailed answers a failure of etcd: 503 to retry, unless the record is
// corrupt (its class says so: 500 naming the key) or the client went away.
func consumersFailed(err error, format string, args ...any) error {
	switch errclass.Of(err) {
	case errclass.Halt, errclass.Canceled, errclass.Invalid:
		return err
	}
	return &apiError{status: http.StatusServiceUnavailable, code: CodeConsumersUnavailable,
		message: fmt.Sprintf(format, args...) + " (etcd unavailable?); retry later", cause: err}
}

// committedCursor is the committed cursor of consumer in target, for the changes
// route's ?consumer= without a cursor: found is false when the consumer never
// committed one there (the feed then starts from the beginning). A bad consumer
// name is a 400, a worker without etcd a 503 naming why.
func (s *Server) committedCursor(ctx context.Context, target registry.Target, consumer string) (cursor rowkey.Position, found bool, err error) {
	if s.cfg.Consumers == nil {
		return rowkey.Position{}, false, errNoConsumers
	}
	rec, err := s.cfg.Consumers.Get(ctx, target, consumer)
	switch {
	case errors.Is(err, consumers.ErrNotFound):
		return rowkey.Position{}, false, nil
	case err != nil:
		return rowkey.Position{}, false, consumersFailed(err, "read of consumer %q's cursor in store %s failed", consumer, target)
	}
	return rec.Cursor, true, nil
}

// forgetConsumers deletes the consumers of a store just deleted, so a store
// created again under its name starts with none. The store is gone whatever
// happens here: a failure is logged, and the cursors left behind are those of a
// store that no longer exists (a later delete of the name takes them).
func (s *Server) forgetConsumers(ctx context.Context, k registry.Kind, name string) {
	if s.cfg.Consumers == nil {
		return
	}
	n, err := s.cfg.Consumers.DeleteStore(ctx, registry.NewTarget(k, name))
	if err != nil {
		s.cfg.Logger.Warn("the deleted store's consumers were not deleted; a store created again under the name sees their cursors until it is deleted again",
			"store", name, "kind", k, "err", err)
		return
	}
	if n > 0 {
		s.cfg.Logger.Info("the deleted store's consumers deleted", "store", name, "kind", k, "consumers", n)
	}
}
