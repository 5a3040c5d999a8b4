package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
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

// storeInfo describes a store in answers: the reference API's fields (name, uri,
// version) and Tidemark's own, side by side at the top level of the object.
type storeInfo struct {
	Name string `json:"name"`
	// URI is where the store's table lives: its directory under DATA_URL.
	URI string `json:"uri"`
	// Version is the base table's version. Lists leave it out, as the reference
	// does: they are served from the registry without opening each store.
	Version   *uint64       `json:"version,omitempty"`
	Kind      registry.Kind `json:"kind"`
	Target    string        `json:"target"`
	CreatedAt time.Time     `json:"created_at"`
	// Schema is a generic store's schema spec, every column's "nullable" spelled
	// out (a reference client reads a missing one as true).
	Schema    json.RawMessage `json:"schema,omitempty"`
	SealOnAdd *bool           `json:"seal_on_add,omitempty"` // generic stores only
	// MaxConsumerLag is the store's max_consumer_lag ("10m0s"), left out when
	// off: adds are refused while a named consumer lags behind by more.
	MaxConsumerLag string `json:"max_consumer_lag,omitempty"`
}

// infoOf describes e; a generic store's registered schema that does not parse is
// an internal error (the registry holds only specs that did).
func (s *Server) infoOf(e registry.Entry) (storeInfo, error) {
	info := storeInfo{Name: e.Name, URI: s.storeURI(e), Kind: e.Kind, Target: e.Target().String(), CreatedAt: e.CreatedAt}
	if e.MaxConsumerLag > 0 {
		info.MaxConsumerLag = time.Duration(e.MaxConsumerLag).String()
	}
	if e.Kind == registry.KindGeneric {
		spec, err := schema.ParseSpec(e.Schema)
		if err != nil {
			return storeInfo{}, internalError(err, "generic store %q has an unreadable registered schema", e.Name)
		}
		if info.Schema, err = spec.MarshalJSON(); err != nil {
			return storeInfo{}, err
		}
		info.SealOnAdd = &e.SealOnAdd
	}
	return info, nil
}

// storeURI is the URL of e's table directory: DATA_URL (without credentials)
// joined with the directory, or the bare directory if DATA_URL is not known.
func (s *Server) storeURI(e registry.Entry) string {
	base := s.cfg.Stores.BucketName()
	u, err := url.Parse(base)
	if base == "" || err != nil || u.Scheme == "" {
		return e.URI
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + e.URI
	u.RawPath = ""
	return u.String()
}

// storeStats is what GET /<kind>/{name} reports besides the store's entry, from
// one fresh snapshot (its version is storeInfo.Version). RowCount counts the live
// rows of the base table (merged); rows still in pending generations are counted
// by PendingRows, where an id written more than once counts each time.
type storeStats struct {
	RowCount           int64     `json:"row_count"`
	FragmentCount      int       `json:"fragment_count"`
	Bytes              int64     `json:"bytes"`
	DeletedRows        int64     `json:"deleted_rows"`
	PendingGenerations int       `json:"pending_generations"`
	PendingRows        int64     `json:"pending_rows"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// storeAnswer is the body of GET /<kind>/{name}: one flat object, as the
// reference's {name, uri, version[, schema]}, with the stats beside them.
type storeAnswer struct {
	storeInfo
	*storeStats
}

// newBaseVersion is the version of the base table a create makes (table.Create).
const newBaseVersion uint64 = 1

// createStoreRequest is the body of POST /rollouts and POST /generic.
type createStoreRequest struct {
	Name      string          `json:"name"`
	Schema    json.RawMessage `json:"schema"`
	SealOnAdd *bool           `json:"seal_on_add"`
	// MaxConsumerLag ("10m"; absent, "" or "0": off) refuses adds while a named
	// consumer of the store lags behind its horizon by more (feed.Backpressure).
	MaxConsumerLag string `json:"max_consumer_lag"`
	// StorageOptions are per-store object-store settings in the reference API,
	// whose clients send null. Every Tidemark store lives under DATA_URL, with the
	// worker's credentials, so only null or {} can be honoured.
	StorageOptions map[string]string `json:"storage_options"`
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
		if len(req.StorageOptions) > 0 {
			return badRequest("storage_options are not supported: every store lives under the worker's DATA_URL, with its credentials; send null or leave the field out")
		}
		e := registry.Entry{Kind: k.kind, Name: req.Name}
		maxLag, err := registry.ParseMaxConsumerLag(req.MaxConsumerLag)
		if err != nil {
			return err
		}
		e.MaxConsumerLag = registry.Duration(maxLag)
		switch k.kind {
		case registry.KindRollout:
			if req.Schema != nil || req.SealOnAdd != nil {
				return badRequest("rollout stores have a fixed schema and take only \"name\", \"max_consumer_lag\" (and \"storage_options\": null)")
			}
		case registry.KindGeneric:
			if len(req.Schema) == 0 || string(req.Schema) == "null" {
				return badRequest("missing \"schema\": a generic store needs a schema spec")
			}
			spec, err := schema.ParseRequestSpec(req.Schema)
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
		case errclass.Exists:
			return referenceWording(k.kind, req.Name, err)
		}
		if err != nil {
			return err
		}
		info, err := s.infoOf(created)
		if err != nil {
			return err
		}
		v := newBaseVersion
		info.Version = &v
		httpjson.WriteJSON(w, http.StatusCreated, info)
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
			info, err := s.infoOf(e)
			if err != nil {
				return err
			}
			infos = append(infos, info)
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
		stats := &storeStats{RowCount: base.Rows, FragmentCount: base.Fragments,
			Bytes: base.Bytes, DeletedRows: base.DeletedRows, UpdatedAt: base.UpdatedAt}
		for _, g := range snap.Pending() {
			stats.PendingGenerations++
			stats.PendingRows += g.Rows
		}
		info, err := s.infoOf(st.Entry())
		if err != nil {
			return err
		}
		info.Version = &base.Version
		httpjson.WriteJSON(w, http.StatusOK, storeAnswer{storeInfo: info, storeStats: stats})
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
		s.cfg.Merges.Metrics().PendingGenerations.DeleteLabelValues(string(k.kind), name)
		s.forgetConsumers(ctx, k.kind, name)
		s.consumerLag.Forget(registry.NewTarget(k.kind, name))
		s.cfg.Logger.Info("store deleted", "store", name, "kind", k.kind)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}
