package worker

import "net/http"

// registerDataRoutes adds the /api/v1 data routes (stores, rows, flush, merge-wal).
func (s *Server) registerDataRoutes(mux *http.ServeMux) {}
