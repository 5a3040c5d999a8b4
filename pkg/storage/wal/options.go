package wal

import (
	"log/slog"
	"time"

	"k8s.io/utils/clock"
)

// Options are the knobs of a Writer and of Drain. The zero value of each field means
// its default.
type Options struct {
	// Clock supplies wall time for _seq (the hybrid logical clock), sealed_at and
	// updated_at. Only wall time: the group-commit linger uses real timers, so a fake
	// clock in a test never stalls a commit.
	Clock clock.PassiveClock
	// Logger receives warnings (failed best-effort deletes, replayed stale entries).
	Logger *slog.Logger
	// Linger is the longest the committer waits for more appends to join an entry
	// (1 ms). It stops waiting earlier once as many appends are queued as the
	// previous entry held, so a lone appender does not pay it. Zero means the
	// default; use a negative value for no linger.
	Linger time.Duration
	// MaxEntryBytes ends the linger early and caps one entry's size (8 MiB). A single
	// append larger than this still goes into one entry of its own.
	MaxEntryBytes int64
	// MaxQueuedBytes bounds the memory of appends waiting for the committer (64 MiB);
	// Append waits (or returns its context's error) while the queue is full.
	MaxQueuedBytes int64
	// DeleteDelay is how long a drained generation file stays listed under
	// deferred_deletes before a later drain hands it to Deletes (5 min), so readers
	// holding an older snapshot can still read it.
	DeleteDelay time.Duration
	// Deletes receives the drained files whose delete delay has passed, once the
	// manifest no longer lists them; its deleter (the worker's cleanup sweeper)
	// deletes them off the merge's path. Nil: they are left for Cleanup.
	Deletes *DeleteQueue

	// beforeManifestWrite, if set, runs before every manifest version write (tests use
	// it to interleave a seal with a drain).
	beforeManifestWrite func(txnID string)
	// beforeFence, if set, runs after an opening writer has replayed and before it
	// writes its fences (tests use it to let a stale writer race the fence).
	beforeFence func()
}

// Option sets one field of Options.
type Option func(*Options)

// WithClock sets Options.Clock.
func WithClock(c clock.PassiveClock) Option { return func(o *Options) { o.Clock = c } }

// WithLogger sets Options.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithLinger sets Options.Linger (negative: no linger).
func WithLinger(d time.Duration) Option { return func(o *Options) { o.Linger = d } }

// WithMaxQueuedBytes sets Options.MaxQueuedBytes.
func WithMaxQueuedBytes(n int64) Option { return func(o *Options) { o.MaxQueuedBytes = n } }

// WithDeleteDelay sets Options.DeleteDelay (negative: due at the next drain).
func WithDeleteDelay(d time.Duration) Option { return func(o *Options) { o.DeleteDelay = d } }

const (
	defaultLinger         = time.Millisecond
	defaultMaxEntryBytes  = 8 << 20
	defaultMaxQueuedBytes = 64 << 20
	defaultDeleteDelay    = 5 * time.Minute
)

func buildOptions(opts []Option) Options {
	var o Options
	for _, f := range opts {
		f(&o)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Linger == 0:
		o.Linger = defaultLinger
	case o.Linger < 0:
		o.Linger = 0
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = defaultMaxEntryBytes
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = defaultMaxQueuedBytes
	}
	switch {
	case o.DeleteDelay == 0:
		o.DeleteDelay = defaultDeleteDelay
	case o.DeleteDelay < 0:
		o.DeleteDelay = 0
	}
	return o
}
