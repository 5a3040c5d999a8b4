// Package archtest keeps Tidemark's package boundaries. Its test lists, as data,
// the planes of the module from the bottom up (runtime support in internal/, row
// formats, the storage engine, etcd coordination, the worker and the master side
// by side, the binaries' wiring, and the tooling, benchmarks and test support on
// top), puts every package in exactly one of them, and fails, naming the import
// chain, when a package links one of a plane above its own (or the process beside
// it). A few rules inside the planes sit beside them: errclass is a leaf, the
// master's parts never reach up to the process that assembles them, test support
// never links into a binary.
//
// The rules are checked on the packages each package links, directly or through
// others (go list's Deps, with and without the chaos build tag), so an arrow that
// points the wrong way two hops down fails as surely as a direct import. Test files
// are not checked: a test may import anything.
package archtest
