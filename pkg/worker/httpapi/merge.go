package httpapi

import (
	"net/http"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

// flushStore seals this worker's memtable of the store into a generation, and
// answers 204 as the reference does (whether there was anything to seal or not).
func (s *Server) flushStore(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		ctx, cancel := detached(r)
		defer cancel()
		if _, err := s.seal(ctx, st); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// mergeAnswer is the body of the merge-wal routes. Reclaimed counts the generations
// drained from this worker's shard (the reference API's field); the others say what
// went into the base table, and Passes how many bounded passes the merge ran (a
// pass that found generations commits them as one base version).
type mergeAnswer struct {
	Reclaimed   int    `json:"reclaimed"`
	Generations int    `json:"generations"`
	Rows        int64  `json:"rows"`
	Version     uint64 `json:"version"`
	Passes      int    `json:"passes"`
}

// mergeStore is POST /generic/{name}/merge-wal.
func (s *Server) mergeStore(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	return s.merge(w, r, registry.NewTarget(registry.KindGeneric, name))
}

// mergeTarget is POST /internal/merge-wal/{target}: "<name>" for a rollout store,
// "generic:<name>" for a generic store.
func (s *Server) mergeTarget(w http.ResponseWriter, r *http.Request) error {
	target, err := registry.ParseTarget(r.PathValue("name"))
	if err != nil {
		return err
	}
	return s.merge(w, r, target)
}

// merge merges this worker's shard of the store into its base table, waiting for a
// merge slot. Unlike writes, it follows the request's context: a merge cancelled at
// any point loses nothing (package merge), and a caller that gave up - the master
// moving on to the next worker - must not leave a merge committing behind its back.
func (s *Server) merge(w http.ResponseWriter, r *http.Request, target registry.Target) error {
	// Token 0: an HTTP trigger carries no fencing token (only the master's gRPC call does).
	res, err := s.cfg.Merges.MergeTarget(r.Context(), target, 0, mergesvc.TriggerRequest)
	if err != nil {
		return err
	}
	httpjson.WriteJSON(w, http.StatusOK, mergeAnswer{Reclaimed: res.Reclaimed, Generations: res.Generations, Rows: res.Rows, Version: res.Version, Passes: res.Passes})
	return nil
}
