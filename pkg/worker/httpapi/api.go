package httpapi

import (
	"net/http"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// kindAPI is what differs between the rollout and generic halves of the data API:
// the path segment, and the JSON keys rows travel under.
type kindAPI struct {
	kind registry.Kind
	// rows is the key of a row array ("records" for rollouts, "rows" for generic
	// stores) in add bodies and list answers; row is the key of one row in a get.
	rows, row string
	// missingRowIsNull answers a get of an absent id with {"<row>": null} and 200
	// (the rollout API) instead of 404 (the generic API).
	missingRowIsNull bool
}

var (
	rolloutAPI = kindAPI{kind: registry.KindRollout, rows: "records", row: "record", missingRowIsNull: true}
	genericAPI = kindAPI{kind: registry.KindGeneric, rows: "rows", row: "row"}
)

// registerDataRoutes adds the /api/v1 data routes (stores, rows, flush, merge-wal).
//
// The control routes (merge-wal, internal, compact, export) always require the credential
// (ServerConfig.Auth); the others, flush included (a data route in the reference API),
// do when ServerConfig.AuthDataRoutes is set. The check runs before the route reads its
// body.
//
// Writes (create, delete, add, seal, merge) run under a context detached from the
// client's: once a write is accepted, a client that disconnects cannot abandon it
// half done. Reads follow the request's context.
func (s *Server) registerDataRoutes(mux *http.ServeMux) {
	for _, k := range []kindAPI{rolloutAPI, genericAPI} {
		base := "/api/v1/rollouts"
		if k.kind == registry.KindGeneric {
			base = "/api/v1/generic"
		}
		mux.Handle("POST "+base, s.data(s.api(s.createStore(k))))
		mux.Handle("GET "+base, s.data(s.api(s.listStores(k))))
		mux.Handle("GET "+base+"/{name}", s.data(s.api(s.getStore(k))))
		mux.Handle("DELETE "+base+"/{name}", s.data(s.api(s.deleteStore(k))))
		mux.Handle("POST "+base+"/{name}/"+k.rows, s.data(s.api(s.addRows(k))))
		mux.Handle("GET "+base+"/{name}/"+k.rows, s.data(s.api(s.listRows(k))))
		mux.Handle("GET "+base+"/{name}/"+k.rows+"/{id}", s.data(s.api(s.getRow(k))))
		mux.Handle("GET "+base+"/{name}/changes", s.data(s.api(s.listChanges(k))))
		mux.Handle("POST "+base+"/{name}/compact", s.control(s.api(s.compactStore(k))))
		mux.Handle("GET "+base+"/{name}/compact/stats", s.data(s.api(s.compactStatsOf(k))))
		mux.Handle("POST "+base+"/{name}/export", s.control(s.api(s.exportStore(k))))
		mux.Handle("GET "+base+"/{name}/export/{id}", s.control(s.api(s.getExport(k))))
	}
	// Checkout exists on rollout stores only, as in the reference.
	mux.Handle("POST /api/v1/rollouts/{name}/checkout", s.data(s.api(s.checkout(rolloutAPI))))
	mux.Handle("GET /api/v1/rollouts/{name}/records/{id}/blob", s.data(s.api(s.getBlob)))
	mux.Handle("POST /api/v1/generic/{name}/get-rows", s.data(s.api(s.getRows(genericAPI))))
	mux.Handle("POST /api/v1/generic/{name}/flush", s.data(s.api(s.flushStore(genericAPI))))
	mux.Handle("POST /api/v1/generic/{name}/merge-wal", s.control(s.api(s.mergeStore)))
	mux.Handle("POST /api/v1/internal/merge-wal/{name}", s.control(s.api(s.mergeTarget)))
}

// control guards a control route: it always requires the credential.
func (s *Server) control(h http.Handler) http.Handler { return s.cfg.Auth.Require(h) }

// data guards a data route: it requires the credential with AuthDataRoutes.
func (s *Server) data(h http.Handler) http.Handler {
	if !s.cfg.AuthDataRoutes {
		return h
	}
	return s.cfg.Auth.Require(h)
}
