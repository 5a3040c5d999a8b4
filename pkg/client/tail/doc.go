// Package tail follows a store's change feed over a worker's HTTP API, the way
// any client would: it pages GET .../changes from a cursor, writes each change's
// row as one JSON line, and, as a named consumer, commits each page's
// next_cursor once the page is written. `worker tail` is its command.
//
// Invariants:
//
//   - At-least-once as a consumer: a page's cursor is committed only after every
//     row of the page was written to Out, so a tail killed at any point resumes
//     (from the committed cursor) at or before the first row it did not write.
//   - It never moves a cursor back: it commits only the next_cursor the server
//     answered after the cursor it sent, and a commit refused as behind (another
//     instance of the consumer got further) leaves the committed cursor alone.
//   - It ends cleanly: at the end of the feed without Follow, and when its
//     context ends (SIGINT, SIGTERM), after committing the page it wrote.
package tail
