package merge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// phaseLog records what OnPhase is told.
type phaseLog struct {
	mu     sync.Mutex
	phases []Phase
	failed []Phase
}

func (l *phaseLog) observe(p Phase, _ time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phases = append(l.phases, p)
	if err != nil {
		l.failed = append(l.failed, p)
	}
}

// A pass reports its phases in order, each once, all succeeded; a pass that fails
// reports the phase it died in and none after it (rollout_wal_merge_errors_total
// says where merges die).
func TestAMergeReportsEachPhaseAndWhereItFailed(t *testing.T) {
	var ok phaseLog
	f := newFixture(t, objstoretest.Mem(t), Config{OnPhase: ok.observe})
	for g := range 2 {
		f.add(t, int64(g), fmt.Sprint("a", g))
		f.seal(t)
	}
	if _, err := f.m.Merge(context.Background(), f.s, true); err != nil {
		t.Fatal(err)
	}
	if want := Phases(); !slices.Equal(ok.phases, want) || len(ok.failed) != 0 {
		t.Fatalf("phases %v (failed %v), want %v once each, none failed", ok.phases, ok.failed, want)
	}

	var bad phaseLog
	faults := objstore.NewFaults(nil)
	f = newFixture(t, objstore.WithFaults(objstoretest.Mem(t), faults), Config{OnPhase: bad.observe})
	f.add(t, 1, "b")
	f.seal(t)
	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyContains: "_gen_", Err: errors.New("disk gone")})
	if _, err := f.m.Merge(context.Background(), f.s, true); err == nil {
		t.Fatal("a merge whose generation reads fail succeeded")
	}
	if !slices.Equal(bad.phases, []Phase{PhaseRead}) || !slices.Equal(bad.failed, []Phase{PhaseRead}) {
		t.Fatalf("phases %v (failed %v), want only a failed read", bad.phases, bad.failed)
	}

	// The fragment cannot be written: the read succeeded, the append failed.
	var noAppend phaseLog
	faults = objstore.NewFaults(nil)
	f = newFixture(t, objstore.WithFaults(objstoretest.Mem(t), faults), Config{OnPhase: noAppend.observe})
	f.add(t, 1, "c")
	f.seal(t)
	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, KeyContains: "/data/", Err: errors.New("disk full")})
	if _, err := f.m.Merge(context.Background(), f.s, true); err == nil {
		t.Fatal("a merge whose fragment write fails succeeded")
	}
	if want := []Phase{PhaseRead, PhaseAppend}; !slices.Equal(noAppend.phases, want) || !slices.Equal(noAppend.failed, []Phase{PhaseAppend}) {
		t.Fatalf("phases %v (failed %v), want %v with the append failed", noAppend.phases, noAppend.failed, want)
	}
}
