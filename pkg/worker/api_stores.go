package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/schema"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// writeOpTimeout bounds a write (create, delete, add, seal) once it is accepted. The
// write runs detached from the client's context, so this is what ends it if the
// object store stalls.
const writeOpTimeout = 2 * time.Minute

// detached returns a context for an accepted write: it keeps r's values but not its
// cancellation, and ends after writeOpTimeout.
func detached(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), writeOpTimeout)
}

// storeInfo describes a store in answers.
type storeInfo struct {
	Name      string        `json:"name"`
	Kind      registry.Kind `json:"kind"`
	Target    string        `json:"target"`
	CreatedAt time.Time     `json:"created_at"`
	// Schema is a generic store's canonical schema spec.
	Schema    json.RawMessage `json:"schema,omitempty"`
	SealOnAdd *bool           `json:"seal_on_add,omitempty"` // generic stores only
}

func infoOf(e registry.Entry) storeInfo {
	info := storeInfo{Name: e.Name, Kind: e.Kind, Target: e.Target(), CreatedAt: e.CreatedAt}
	if e.Kind == registry.KindGeneric {
		info.Schema = e.Schema
		info.SealOnAdd = &e.SealOnAdd
	}
	return info
}

// storeStats is what GET /<kind>/{name} reports besides the store's entry, from
// one fresh snapshot. RowCount counts the live rows of the base table (merged);
// rows still in pending generations are counted by PendingRows, where an id
// written more than once counts each time.
type storeStats struct {
	Version            uint64    `json:"version"`
	RowCount           int64     `json:"row_count"`
	FragmentCount      int       `json:"fragment_count"`
	Bytes              int64     `json:"bytes"`
	DeletedRows        int64     `json:"deleted_rows"`
	PendingGenerations int       `json:"pending_generations"`
	PendingRows        int64     `json:"pending_rows"`
	UpdatedAt          time.Time `json:"updated_at"`
}

type storeAnswer struct {
	Store storeInfo   `json:"store"`
	Stats *storeStats `json:"stats,omitempty"`
}

// createStoreRequest is the body of POST /rollouts and POST /generic.
type createStoreRequest struct {
	Name      string          `json:"name"`
	Schema    json.RawMessage `json:"schema"`
	SealOnAdd *bool           `json:"seal_on_add"`
}

func (s *Server) createStore(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		var req createStoreRequest
		if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
			return err
		}
		if err := registry.ValidateName(req.Name); err != nil {
			return err
		}
		e := registry.Entry{Kind: k.kind, Name: req.Name}
		switch k.kind {
		case registry.KindRollout:
			if req.Schema != nil || req.SealOnAdd != nil {
				return badRequest("rollout stores have a fixed schema and take only \"name\"")
			}
		case registry.KindGeneric:
			if len(req.Schema) == 0 || string(req.Schema) == "null" {
				return badRequest("missing \"schema\": a generic store needs a schema spec")
			}
			spec, err := schema.ParseSpec(req.Schema)
			if err != nil {
				return fmt.Errorf("schema: %w", err)
			}
			if e.Schema, err = spec.MarshalJSON(); err != nil {
				return err
			}
			e.SealOnAdd = req.SealOnAdd != nil && *req.SealOnAdd
		}
		ctx, cancel := detached(r)
		defer cancel()
		created, err := s.cfg.Stores.Create(ctx, e)
		switch errclass.Of(err) {
		case errclass.Gone, errclass.Conflict:
			// The table vanished under the create, or a write of it lost: a create
			// clears what an unregistered name left behind, and that can be the
			// table of another create of the name running at the same time (or of
			// one a delete is removing). Not "gone": the client asked to create.
			return errclass.Wrap(errclass.Conflict, fmt.Errorf("%s store %q: created or deleted at the same time by another request: %w", k.kind, req.Name, err))
		}
		if err != nil {
			return err
		}
		httpjson.WriteJSON(w, http.StatusCreated, storeAnswer{Store: infoOf(created)})
		return nil
	}
}

func (s *Server) listStores(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		entries, err := s.cfg.Stores.Registry().List(r.Context(), k.kind)
		if err != nil {
			return err
		}
		infos := make([]storeInfo, 0, len(entries))
		for _, e := range entries {
			infos = append(infos, infoOf(e))
		}
		httpjson.WriteJSON(w, http.StatusOK, struct {
			Stores []storeInfo `json:"stores"`
		}{infos})
		return nil
	}
}

// freshStore opens the store the request's path names and takes a fresh snapshot
// of it (every shard's seals and the newest base version); the caller releases
// the store.
func (s *Server) freshStore(r *http.Request, k kindAPI) (*store.Store, *store.Snapshot, func(), error) {
	name, err := pathName(r)
	if err != nil {
		return nil, nil, nil, err
	}
	st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
	if err != nil {
		return nil, nil, nil, err
	}
	snap, err := st.Fresh(r.Context())
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	return st, snap, release, nil
}

func (s *Server) getStore(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		st, snap, release, err := s.freshStore(r, k)
		if err != nil {
			return err
		}
		defer release()
		base := snap.Base.Stats()
		stats := &storeStats{Version: base.Version, RowCount: base.Rows, FragmentCount: base.Fragments,
			Bytes: base.Bytes, DeletedRows: base.DeletedRows, UpdatedAt: base.UpdatedAt}
		for _, g := range snap.Pending() {
			stats.PendingGenerations++
			stats.PendingRows += g.Rows
		}
		httpjson.WriteJSON(w, http.StatusOK, storeAnswer{Store: infoOf(st.Entry()), Stats: stats})
		return nil
	}
}

func (s *Server) deleteStore(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		ctx, cancel := detached(r)
		defer cancel()
		if err := s.cfg.Stores.Delete(ctx, k.kind, name); err != nil {
			return err
		}
		s.cfg.Series.PendingGenerations.DeleteLabelValues(string(k.kind), name)
		s.cfg.Logger.Info("store deleted", "store", name, "kind", k.kind)
		httpjson.WriteJSON(w, http.StatusOK, struct {
			Deleted string `json:"deleted"`
		}{name})
		return nil
	}
}
