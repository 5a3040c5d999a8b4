// Package auth is the credential check of every Tidemark control surface: the
// worker's WorkerService and internal HTTP routes, the master's AdminService and
// task routes, and (when configured) the worker's data routes.
//
// A credential is a bearer token (Authorization: Bearer <token> on HTTP, the
// "authorization" metadata on gRPC), a client certificate verified against a
// configured CA (mutual TLS), or both; a Guard configured with both requires both.
//
// Invariants:
//   - A call a Guard refuses is answered 401 (HTTP, with WWW-Authenticate) or
//     UNAUTHENTICATED (gRPC) before its handler runs: nothing of the request, not
//     even its body, is read or acted on.
//   - Tokens are compared in constant time over their SHA-256 digests, against
//     every configured token, so neither the length nor the position of a
//     mismatch, nor which of the rotation's tokens matched, shows in the timing.
//   - A token is never logged, counted or echoed back; failures are logged with
//     the remote address and the route, and counted by surface and reason.
//   - The gRPC health service, GET /api/v1/health and GET /metrics never need a
//     credential, so probes and scrapes work without one (they reveal no data).
//     Neither does reflection asked about the health service alone (what grpcurl
//     asks before it calls health); any other reflection request needs one.
//   - A nil *Guard accepts everything: it is what --auth-disabled builds, and the
//     binaries refuse to start that way unless the operator asked for it.
//
// Tokens travel in the clear on plaintext connections. That is a supported
// setup on loopback or inside a private network; anywhere else, turn TLS on
// (--tls-cert, --tls-key) so the token cannot be read off the wire.
package auth
