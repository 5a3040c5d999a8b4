package httpjson

// BackpressureHeader is on the answer of an add that waited for its store's
// backpressure (store.Store.AdmitAdd): the wait, in whole milliseconds. An add that
// did not wait has no such header. A client that sees it rising is writing faster
// than merges keep up, and is being slowed to their pace.
const BackpressureHeader = "X-Tidemark-Backpressure-Delay"
