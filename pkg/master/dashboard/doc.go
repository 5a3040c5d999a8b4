// Package dashboard is the operator's web UI, served by the master under /ui/:
// an overview of the cluster, the stores (searchable, sortable, with a marker for
// those falling behind), one store's history, tasks, records, named consumers
// with their lag, and its merge, compact and verify buttons, and the task queue
// updating live.
//
// Pages are rendered on the server with html/template; a little JavaScript from
// the binary (go:embed, no CDN) filters tables, posts the buttons and follows the
// task feed. Charts are SVG drawn by the server.
//
// Where the data comes from:
//   - Buttons enqueue through the master's AdminService (Admin), the code path of
//     `master admin enqueue`: the same target check, deduplication and scheduler
//     wake-up. The task lists, one task, the workers and the stats rows (with their
//     missing shards) come from it too.
//   - The charts and the live task feed come from etcd watches on P/stats/ and
//     P/tasks/ (Feed): every replica keeps a bounded in-memory history of the
//     scans (no new storage), and browsers get task changes as server-sent events,
//     not by polling.
//   - A store's named consumers are read from etcd when its page is asked for
//     (ConsumerCursors, the master's consumers.Cursors), and each one's lag is
//     measured against the store's horizon as the master's horizon.View follows
//     it (Horizons): the lag of the workers' tidemark_feed_consumer_lag_seconds.
//   - Records are read through a registered worker's HTTP data API, with the
//     master's own outgoing credential (package workerhttp, the client the HTTP
//     API's record routes use too: a worker that cannot be reached is passed over
//     for the next).
//
// Invariants:
//   - Every page and action but the login form and the static assets needs a
//     session: a login with a credential the master's auth.Guard accepts (the
//     bearer token, and the client certificate when mutual TLS is on) sets an
//     HttpOnly, SameSite=Strict cookie (Secure when the master serves TLS) naming
//     a random session id. The token itself is never stored in the browser.
//   - Every POST carries the session's CSRF token (a form field or the
//     X-CSRF-Token header), compared in constant time; a POST without it is
//     refused before it acts.
//   - Every value shown goes through html/template's contextual escaping or, in
//     the browser, through textContent; a store name or row value with markup in
//     it is shown as text. The Content-Security-Policy allows scripts and styles
//     from the master only, so an injected inline script would not run either.
//   - With authentication disabled (--auth-disabled) the pages are open, and each
//     says so in a banner; the CSRF check still applies.
//   - History is bounded: per series a fixed number of points within the last
//     hour; a restarted master starts with an empty history.
package dashboard
