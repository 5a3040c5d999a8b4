// Package registry records which stores exist, per kind. It is the only source of
// truth for whether a store exists: a store directory without a registry object is
// garbage, and a registry object is removed only after its store's data is deleted.
//
// A store is registered by one object per store under DATA_URL:
//
//	_registry/rollout/<name>.json   {name, kind, uri, created_at[, max_consumer_lag]}
//	_registry/generic/<name>.json   the same, plus {schema, seal_on_add}
//
// Invariants:
//
//   - Names are validated before any key is built: [A-Za-z0-9_][A-Za-z0-9._-]*, 1-128
//     characters, not ending in ".." and without "__0x" (so every key built from a
//     name is one objstore accepts); "_registry" and "_stats" are reserved.
//   - Creating a store is a put-if-absent of its registry object: of concurrent creators
//     of one name, on any number of workers, exactly one wins and the others get
//     ErrExists; a generic store's schema is fixed by the winner.
//   - A Target names a store unambiguously; its text is "<name>" for a rollout store
//     and "generic:<name>" for a generic store (a name cannot contain ':'), and a
//     Target parsed from text holds a valid name.
//   - Listing a kind's registry is how the master's scanner discovers stores, so a
//     registered store is always found by the next scan.
package registry
