package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTailRefusesAStoreWithoutItsKind(t *testing.T) {
	for _, arg := range []string{"r", "rollout/r", "generic/", "tables/r"} {
		_, err := run(t, "tail", arg)
		if err == nil || !strings.Contains(err.Error(), "rollouts/<name> or generic/<name>") {
			t.Errorf("tail %s: %v, want the expected form named", arg, err)
		}
	}
}

// The flags reach the requests: the store, the consumer, the page size and
// the worker's address; a page short of the limit ends the command.
func TestTailSendsItsFlagsToTheWorker(t *testing.T) {
	var got string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"changes":[{"cursor":"c1.AAAAAAAAAAo","row":{"id": "a"}}],"next_cursor":"c1.AAAAAAAAAAs"}`))
	}))
	defer hs.Close()
	t.Setenv("TAIL_URL", hs.URL)
	out, err := run(t, "tail", "generic/events", "--limit", "7")
	if err != nil {
		t.Fatal(err)
	}
	if out != `{"id":"a"}`+"\n" || got != "/api/v1/generic/events/changes?limit=7" {
		t.Fatalf("printed %q after requesting %q", out, got)
	}
}
