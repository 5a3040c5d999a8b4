package httpjson

// The headers of the worker's causal tokens (wal.Writer.AppendAfter): an add answers
// with the highest _seq it gave in SeqHeader, and a request that passes it back in
// AfterHeader is ordered after that write. They are here, not in package worker, so
// a client (loadgen, the e2e tests) names them without linking the server.
const (
	SeqHeader   = "X-Tidemark-Seq"
	AfterHeader = "X-Tidemark-After"
)
