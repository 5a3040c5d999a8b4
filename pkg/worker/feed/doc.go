// Package feed is the change feed's server side (issue 32) but for its HTTP
// routes (pkg/worker/httpapi serves them with the data API's request parsing and
// row encoding): Read answers one page of a store's feed up to the store's
// horizon, long polls included; NewLagCollector is the consumers' lag metric
// (tidemark_feed_consumer_lag_seconds); Backpressure refuses adds to a store
// whose named consumer lags beyond its max_consumer_lag. The store-level read of
// a page (store.Store.Changes) stays in pkg/store, which it needs the
// internals of; the horizons and cursors live in etcd (pkg/coord/horizon,
// pkg/coord/consumers).
//
// Invariants:
//
//   - A page never answers a row above the store's horizon, and no row below its
//     next cursor can appear later: Read takes the Changed channel, then notes
//     the store's clock and reads the horizon, then reads the page, in that order,
//     in one function (read.go states why), so no caller can get it wrong.
//   - Without horizons (no etcd) nothing says which rows are safe to deliver: the
//     feed answers none rather than guess.
//   - An add never waits for etcd but a store's first on this worker: the
//     consumer-lag verdict is cached per store (lagVerdictTTL) and refreshed in
//     the background, and an etcd that cannot be read admits (max_consumer_lag
//     protects a consumer's chance to keep up, not the store's data).
//   - A scrape of the lag reads etcd at scrape time and is bounded (stores,
//     consumers, time); a failed read leaves series out, never fails the scrape.
package feed
