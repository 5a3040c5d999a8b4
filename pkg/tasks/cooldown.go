package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Cooldown is the record at P/cooldown/<kind>/<target>: how often in a row tasks
// of that kind failed on the target, and until when Claim skips them.
//
// Non-merge kinds but export cool down on every failure. A merge_wal that fails is retried at
// the next sweep, because deferring merges lets pending generations pile up and
// every read of the store fans out over them - unless the failure needs a human
// (Result.Halt, a corrupt object): retrying that every sweep only repeats it, so it
// cools down like any other kind.
//
// The record has no lease, so that its Until follows the store's clock; a success
// deletes it, and Prune deletes records that expired more than its maxAge ago.
type Cooldown struct {
	Failures  int       `json:"failures"`
	Until     time.Time `json:"until"`
	LastError string    `json:"last_error,omitempty"`
}

// cools reports whether a failure of kind k with result r puts its kind+target in
// cooldown. An export's does not: each export is a task of its own, and one
// that failed (a destination refused, a bad filter) says nothing of the next,
// which names its own.
func cools(k Kind, r Result) bool { return k != KindMergeWAL && k != KindExport || r.Halt }

// backoff is the cooldown after the n-th failure in a row: base*2^(n-1), at most
// the configured maximum.
func (o options) backoff(n int) time.Duration {
	d := o.cooldownBase
	for i := 1; i < n && d < o.cooldownMax; i++ {
		d *= 2
	}
	return min(d, o.cooldownMax)
}

func decodeCooldown(key string, value []byte) (Cooldown, error) {
	var cd Cooldown
	if err := json.Unmarshal(value, &cd); err != nil {
		return Cooldown{}, fmt.Errorf("cooldown record %s: corrupt: %w", key, err)
	}
	return cd, nil
}

func encodeCooldown(cd Cooldown) string {
	data, err := json.Marshal(cd)
	if err != nil {
		panic(fmt.Sprintf("tasks: encode cooldown: %v", err)) // only plain fields
	}
	return string(data)
}

// Cooldown returns the cooldown record of kind on target, and false if there is
// none. A record whose Until has passed no longer blocks claims but still counts
// the failures in a row.
func (s *Queue) Cooldown(ctx context.Context, kind Kind, target registry.Target) (Cooldown, bool, error) {
	if err := validateKind(kind); err != nil {
		return Cooldown{}, false, err
	}
	if err := validateTarget(target); err != nil {
		return Cooldown{}, false, err
	}
	cd, _, ok, err := s.getCooldown(ctx, kind, target)
	return cd, ok, err
}

func (s *Queue) getCooldown(ctx context.Context, kind Kind, target registry.Target) (Cooldown, int64, bool, error) {
	key := s.keys.Cooldown(string(kind), target.String())
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return Cooldown{}, 0, false, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Cooldown{}, 0, false, nil
	}
	cd, err := decodeCooldown(key, resp.Kvs[0].Value)
	return cd, resp.Kvs[0].ModRevision, true, err
}

// cooldownOps are the compare and op that Finish adds for an outcome of t: a
// failure that cools (see cools) counts one more in a row against the record read at
// rev (0: none), a success deletes the record, any other failure (a merge's) has
// none.
func (s *Queue) cooldownOps(t Task, r Result, cd Cooldown, rev int64) ([]clientv3.Cmp, []clientv3.Op) {
	key := s.keys.Cooldown(string(t.Kind), t.Target.String())
	if r.Err == nil {
		return nil, []clientv3.Op{clientv3.OpDelete(key)}
	}
	if !cools(t.Kind, r) {
		return nil, nil
	}
	cd.Failures++
	cd.Until = t.FinishedAt.Add(s.opts.backoff(cd.Failures))
	cd.LastError = t.Error
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
		[]clientv3.Op{clientv3.OpPut(key, encodeCooldown(cd))}
}
