// Package faultproxy is an HTTP reverse proxy in front of a real object store
// (MinIO, fake-gcs-server) that misbehaves the way production stores do, so tests
// and benchmarks drive the real SDK path (gocloud's s3blob and gcsblob, the AWS and
// Google clients' own retries, objstore's classification and WithRetry) instead of
// an injected Go error.
//
// Per request it forwards, or answers with the store's own throttle response
// without forwarding (S3's 503 SlowDown XML, GCS's 429 JSON: see Flavor), or drops
// the connection: before forwarding (the store never saw the request), or after the
// store answered and before the client hears anything (the store performed a write
// its client cannot know about, and an SDK that resends a conditional write then
// gets "precondition failed" for its own object). It can also strip the
// conditional-write precondition (S3's If-None-Match, GCS's ifGenerationMatch), so
// a test has a real store that silently overwrites: a bucket without conditional
// writes.
//
// Invariants:
//
//   - Every request is counted once, under exactly one of Forwarded, Throttled,
//     DroppedBefore or DroppedAfter (Counts); a request that matches no fault is
//     Forwarded. A forwarded request whose precondition was removed is also counted
//     as Stripped.
//   - The proxy never alters a body, in either direction: what it forwards is the
//     client's request and the store's answer byte for byte. Only the precondition
//     (and, on S3, the signature it invalidates) is ever changed, and only when
//     Faults.StripConditional asks for it.
//   - The faults are drawn from one seeded random source, one draw per request, so
//     a test's fault fractions are reproducible up to the order in which concurrent
//     requests arrive.
package faultproxy
