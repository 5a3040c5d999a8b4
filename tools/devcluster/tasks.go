package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// watchTasks prints a line for every task that finishes (done or failed), until
// ctx is done: what a user of the dev cluster wants to see happen. It reads the
// same keys an operator reads with etcdctl.
func watchTasks(ctx context.Context, client *clientv3.Client, prefix string, console *Console) {
	key := keys.Under(prefix).TasksPrefix()
	for ctx.Err() == nil {
		for wr := range client.Watch(ctx, key, clientv3.WithPrefix(), clientv3.WithPrevKV()) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.PUT {
					continue
				}
				if line, ok := taskLine(ev.Kv.Value, ev.PrevKv); ok {
					console.Line("tasks", line)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // the watch broke: watch again from now
		}
	}
}

// taskLine describes a task record that just finished, or reports false.
func taskLine(value []byte, prev *mvccpb.KeyValue) (string, bool) {
	var t tasks.Task
	if json.Unmarshal(value, &t) != nil || !t.State.Finished() {
		return "", false
	}
	if prev != nil {
		var p tasks.Task
		if json.Unmarshal(prev.Value, &p) == nil && p.State == t.State {
			return "", false
		}
	}
	took := ""
	if !t.StartedAt.IsZero() && !t.FinishedAt.IsZero() {
		took = fmt.Sprintf(" in %s", t.FinishedAt.Sub(t.StartedAt).Round(time.Millisecond))
	}
	what := t.Detail
	if t.State == tasks.StateFailed {
		what = t.Error
	}
	attempts := ""
	if t.Attempts > 1 {
		attempts = fmt.Sprintf(" (attempt %d)", t.Attempts)
	}
	return fmt.Sprintf("%s %s %s%s%s: %s  [task %s]", t.Kind, t.Target, t.State, took, attempts, what, t.ID), true
}
