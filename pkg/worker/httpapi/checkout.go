package httpapi

import (
	"net/http"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// checkoutRequest is the body of POST /rollouts/{name}/checkout, the reference's
// CheckoutRequest. A missing version is a 400, so the field is a pointer.
type checkoutRequest struct {
	Version *uint64 `json:"version"`
}

// checkoutAnswer is the reference's VersionResponse.
type checkoutAnswer struct {
	Version uint64 `json:"version"`
}

// checkout answers POST /rollouts/{name}/checkout: 200 {"version": v} when the
// store can be read at version v (it is retained), a 404 naming the readable
// versions when it cannot.
//
// The reference pins its worker's one shared handle of the store to v: every later
// read through that worker, by any client, sees v, and appends and merges of the
// store on that worker stop until something refreshes the handle. With several
// workers behind one address that pin is a property of whichever worker took the
// request, and a stopped merge is the pending-generation pile-up Tidemark exists to
// prevent. Here checkout changes nothing: it checks v and answers it, and the
// client reads at v by passing ?version=v to its lists and gets. A reference
// client that checks out and then lists without a version reads the newest rows
// here, not v's: the one answer that differs from the reference's.
func (s *Server) checkout(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		var req checkoutRequest
		if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
			return err
		}
		if req.Version == nil {
			return badRequest("request body must be a JSON object with a \"version\": the table version to read")
		}
		if *req.Version == 0 {
			return badRequest("version must be a table version (a positive integer), got 0")
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		view, err := st.At(r.Context(), *req.Version)
		if err != nil {
			return versionFailure(st.Entry(), err)
		}
		httpjson.WriteJSON(w, http.StatusOK, checkoutAnswer{Version: view.Version()})
		return nil
	}
}
