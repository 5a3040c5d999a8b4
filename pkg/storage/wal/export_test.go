package wal

// Abandon simulates a crash of the writer's process: the committer stops without
// flushing, the write in flight is canceled (it may or may not land), queued appends
// fail, and nothing is cleaned up. The Writer must not be used afterwards.
func (w *Writer) Abandon() {
	w.qmu.Lock()
	w.closed = true
	w.qmu.Unlock()
	w.cancel()
	<-w.done
}

// CommitterDone is closed when the committer goroutine has returned.
func (w *Writer) CommitterDone() <-chan struct{} { return w.done }

// WithBeforeManifestWrite runs f before every manifest version write, with the
// edit's txn id ("open-…", "seal-…", "drain-…").
func WithBeforeManifestWrite(f func(txnID string)) Option {
	return func(o *Options) { o.beforeManifestWrite = f }
}

// WithBeforeFence runs f after an opening writer replayed and before its fences.
func WithBeforeFence(f func()) Option {
	return func(o *Options) { o.beforeFence = f }
}
