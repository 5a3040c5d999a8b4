package etcdtest

import (
	"context"
	"testing"
	"time"
)

func TestStartServesReadsAndWrites(t *testing.T) {
	c, endpoints := Start(t)
	if len(endpoints) != 1 || endpoints[0] == "http://127.0.0.1:0" {
		t.Fatalf("endpoints %v: want the kernel-chosen address", endpoints)
	}
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get k: %v %v", resp, err)
	}
}

// A client made before a Stop fails while the server is gone and works again, with
// the data intact, after Restart: what "etcd lost while running" tests rely on.
func TestRestartKeepsDataAndEndpoints(t *testing.T) {
	s := StartServer(t)
	c := s.Client(t)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	before := s.Endpoints()

	s.Stop()
	if err := Ping(ctx, c, 300*time.Millisecond); err == nil {
		t.Fatal("read succeeded while the server was stopped")
	}

	s.Restart(t)
	if got := s.Endpoints(); got[0] != before[0] {
		t.Fatalf("endpoints moved from %v to %v", before, got)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := Ping(ctx, c, time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client did not reconnect after restart: %v", err)
		}
	}
	resp, err := c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("get k after restart: %v %v", resp, err)
	}
}
