package e2e

import (
	"os"
	"testing"
	"time"
)

// writeFaults replaces the workers' faults file (polled every 250 ms), and waits
// for them to have read it.
func writeFaults(t *testing.T, path, spec string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
}
