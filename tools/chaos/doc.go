// Package chaos is the fault hook of the reliability campaigns (`make chaos`): it
// lets a test make the object store of a running worker or master misbehave, and
// change how while the process runs.
//
// The hook exists only in binaries built with `-tags chaos`. In every other build
// WrapBucket returns its Bucket untouched and nothing here runs, so a production
// binary cannot be made to inject faults by an environment variable.
//
// In a chaos build, when TIDEMARK_CHAOS_FAULTS_FILE names a file, WrapBucket wraps
// the Bucket with objstore.WithFaults and polls the file about every 250 ms: its
// content is a Spec in JSON (error rate and the request kinds it hits, write phase,
// latency and jitter, a concurrency cap with its throttle mode, and per-key rules
// that fail or hang requests). A missing or empty file means no faults; a file that
// does not parse keeps the faults in force and is logged. Every change is logged at
// warn level, and the fault counters are written next to the file
// (<file>.stats.json) so a test can report how many faults it injected.
//
// TIDEMARK_CHAOS_CLOCK_OFFSET skews the wall clock a chaos-built worker stamps
// _seq with, by a duration read at start (Clock).
//
// Invariants: a chaos build with the variables unset behaves like a normal build;
// the faults in force are always those of the last file content that parsed (or
// none); counters survive changes of the faults.
package chaos
