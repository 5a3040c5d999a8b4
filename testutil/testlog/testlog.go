// Package testlog is where tests capture what a process or a component logs: a
// Buffer that the logger writes while the test reads it, and, for a
// slog.JSONHandler writing to it, the records with a given message. The one
// copy of what five test files each wrote for themselves.
package testlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer safe for a logger (or several writers) and the test
// to share. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Records returns the records whose message is msg, of a slog.JSONHandler
// writing to b, each decoded into its keys. A line that is not a JSON object
// fails the test.
func (b *Buffer) Records(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec[slog.MessageKey] == msg {
			out = append(out, rec)
		}
	}
	return out
}
