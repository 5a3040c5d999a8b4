// Package consumers keeps the committed cursors of the change feed's named
// consumers in etcd: how far each consumer of a store has read, so that it (or
// another instance of it) resumes there after a restart.
//
//	P/consumers/<target>/<consumer>   {cursor, committed_at}   no lease
//
// A consumer reads pages of a store's feed and commits the next_cursor of each
// page it has processed (Commit); it resumes from its committed cursor (Get).
// Delivery is at-least-once: what was read after the committed cursor and not
// committed is read again.
//
// Invariants:
//
//   - A committed cursor never moves backwards. Commit is a read-compare-write
//     guarded by the key's mod revision: a commit behind the stored cursor fails
//     with ErrBehind (naming the stored one) and writes nothing, a commit equal to
//     it succeeds without writing, and a commit that lost a race with another
//     write reads again and decides again. So two instances of one consumer
//     committing at once end at the larger of their cursors, whatever the
//     interleaving, and a watcher of the key never sees it decrease.
//   - Names are checked before any key is built (ValidateName): a consumer name
//     is 1 to MaxNameLen characters of [A-Za-z0-9._-], not starting with '.' or
//     '-', so it is one path segment of a URL and one segment of a key, and one
//     store's consumers never match another's prefix.
//   - The cursors of a store go with it (DeleteStore): a store created again
//     under the same name starts with no consumers. A commit racing the delete
//     can leave a cursor behind; the next delete of that name, or its consumer's
//     commit on the new store (which may then be ErrBehind: the consumer must
//     start over), shows it.
//   - Nothing here reads the store: a cursor is an opaque position, checked only
//     for order. Whether the store exists is the caller's question.
package consumers
