// Package grpcserver is the gRPC server plumbing the worker and the master share:
// the recover and logging interceptors, the health and reflection services every
// Tidemark gRPC server registers, and a serve loop that stops gracefully.
package grpcserver
