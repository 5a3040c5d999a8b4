package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// master dev warns at startup, once, about the settings in its environment that
// do nothing, as master serve and worker serve do: a reference system's setting
// Tidemark has no equivalent of, and a misspelled one. It warned about none.
func TestDevLogsItsSettingsWarningsOnceAtStartup(t *testing.T) {
	t.Setenv("ROLLOUT_CACHE_BYTES", "1048576") // the reference's, no equivalent
	t.Setenv("MERGE_WAL_INTERVL", "1s")        // MERGE_WAL_INTERVAL misspelled
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	// A master binary that does not exist: runDev stops right after the warnings.
	root.SetArgs([]string{"--dir", t.TempDir(), "--master-binary", filepath.Join(t.TempDir(), "none"), "--workers", "0"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "master binary") {
		t.Fatalf("err = %v, want the missing master binary", err)
	}
	for _, want := range []string{
		"dev    | WARN environment: ROLLOUT_CACHE_BYTES is a setting of the reference system that Tidemark has no equivalent of; it is ignored variable=ROLLOUT_CACHE_BYTES\n",
		"dev    | WARN environment: MERGE_WAL_INTERVL is not a setting of Tidemark or of the reference system; it is ignored (did you mean MERGE_WAL_INTERVAL?) variable=MERGE_WAL_INTERVL use=MERGE_WAL_INTERVAL\n",
	} {
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%d times on the console, want once: %q\nconsole:\n%s", n, want, out.String())
		}
	}
}

// DATA_URL is --data-url's variable, as for master serve and worker serve: a path
// given there is refused before anything starts.
func TestDevReadsItsDataURLFromDATA_URL(t *testing.T) {
	t.Setenv("DATA_URL", "./data/store")
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--dir", t.TempDir(), "--master=false", "--workers", "0", "--etcd-addr", "127.0.0.1:0"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), `data URL "./data/store" has no scheme`) {
		t.Fatalf("err = %v, want DATA_URL's path refused", err)
	}
}
