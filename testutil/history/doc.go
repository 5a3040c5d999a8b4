// Package history records what clients did to a Tidemark cluster (adds, gets and
// lists, with their causal tokens, call and return times and outcomes) and checks
// every read of the recording against what the writes allow.
//
// # The model
//
// Each row id is a register with last-writer-wins by _seq. Every add writes one row
// with a value no other add uses, so a read's value names the write it came from,
// and the token an add answers (X-Tidemark-Seq) is that row's _seq: the register's
// order is known for every acknowledged write. A write whose answer never came
// (Unknown) or was an error (Failed) may or may not be stored; its _seq is unknown
// but greater than the token it carried. An acknowledged add without ?flush=true is
// durable but only visible after a later seal, so it may appear at any time after
// its call. Two workers' clocks can give two writes one _seq: the write through the
// worker whose INSTANCE_ID (its shard) sorts last wins (rowkey.Version).
//
// # What is checked
//
//   - Linearizability per id (porcupine, Linearizable): there is an order of the writes
//     and reads, each at a point between its call and its return, in which every read
//     returns the value of the highest-_seq write before it. A write acknowledged with
//     ?flush=true is thereby visible to every read that starts after its answer, unless
//     a newer write is visible instead. Reads are modelled as docs/API.md ("Read
//     guarantees") promises them, not stronger: a read sees the writes acknowledged
//     with ?flush=true before its call that its causal token covers (_seq at most the
//     token), and every other write acknowledged more than Config.Staleness (the
//     snapshot lifetime, SNAPSHOT_TTL, plus a margin) before its call. For the
//     porcupine history a read's call is therefore moved back to the first answer of a
//     write it is not bound to see; the writes it skips that way are held to it by the
//     direct check of the token instead. A list is one read of every id the history
//     writes (an id it does not return is a read of "no row").
//   - Directly (Direct), with the operations named in each violation:
//     a value that no add ever sent never appears, nor one whose add started after
//     the read returned; reads through one worker never go back: a get or a list's
//     row, once returned by a worker, is never followed through that worker by an
//     older value of the id (lower _seq, or no row), nor by the other of two writes
//     of equal _seq, which also makes lists and gets agree; and a read carrying a causal token returns, for its id, a value at least
//     as new as every write acknowledged with ?flush=true before its call whose _seq
//     the token covers.
//
// Not checked: that an acknowledged unflushed write becomes visible within the flush
// interval (it is allowed to appear at any time, or not by the end of the history).
//
// A Recorder is safe for concurrent use; the checkers are pure functions of the
// recorded operations.
package history
