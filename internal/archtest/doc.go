// Package archtest keeps Tidemark's package boundaries: its test lists, as data,
// which planes may import which (the storage engine and the row formats at the
// bottom, etcd coordination above the engine, the worker and the master beside each
// other, inside the master its process above its parts, test support and tooling out
// of the library) and fails, naming the import
// chain, when a package links one it must not.
//
// The rules are checked on the packages each package links, directly or through
// others (go list's Deps, with and without the chaos build tag), so an arrow that
// points the wrong way two hops down fails as surely as a direct import. Test files
// are not checked: a test may import anything.
package archtest
