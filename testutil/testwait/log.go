package testwait

import (
	"context"
	"log/slog"
	"sync"
)

// Log is a slog.Handler that counts the records of each message, for a test to
// wait for an event a component reports only in its log (a failed attempt, a
// lost lease). It discards the records.
type Log struct {
	mu sync.Mutex
	n  map[string]int
}

// Logger returns a logger whose records l counts.
func (l *Log) Logger() *slog.Logger { return slog.New(l) }

// Count is how many records of msg were logged so far.
func (l *Log) Count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[msg]
}

func (l *Log) Enabled(context.Context, slog.Level) bool { return true }
func (l *Log) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *Log) WithGroup(string) slog.Handler            { return l }

func (l *Log) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[r.Message]++
	return nil
}
