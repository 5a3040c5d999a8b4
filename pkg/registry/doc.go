// Package registry will record which stores exist, per kind. It is built in a later
// issue; this file only states its role and the invariants it will guarantee.
//
// A store is registered by one object per store under DATA_URL:
//
//	_registry/rollout/<name>.json   {name, uri, created_at, ...}
//	_registry/generic/<name>.json   the same, plus {schema, seal_on_add}
//
// Invariants it will guarantee:
//
//   - Names are validated before any key is built: [A-Za-z0-9_][A-Za-z0-9._-]*, 1-128
//     characters; "_registry" and "_stats" are reserved.
//   - Creating a store is a put-if-absent of its registry object: of concurrent creators
//     of one name, on any number of workers, exactly one wins and the others see "already
//     exists"; a generic store's schema is fixed by the winner.
//   - A target string names a store unambiguously: "<name>" for a rollout store and
//     "generic:<name>" for a generic store (a name cannot contain ':').
//   - Listing a kind's registry is how the master's scanner discovers stores, so a
//     registered store is always found by the next scan.
package registry
