package tasks

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/follow"
)

// FollowEnqueues calls notify after every change that adds a task to the queue
// (a put of P/queue/<id>, by any master replica), and whenever a listing of the
// queue finds it non-empty (at the start, and after the watch broke), until ctx
// is done. A scheduler woken by it claims a task as soon as it is enqueued rather
// than at its next poll: with merges on demand, that poll was up to a second of
// every merge cycle.
func (s *Queue) FollowEnqueues(ctx context.Context, notify func()) {
	follow.Run(ctx, s.client, s.keys.QueuePrefix(), enqueues(notify), nil, s.opts.logger, "task queue")
}

// enqueues is the follow.Handler of FollowEnqueues: it keeps no copy, only tells.
type enqueues func()

func (n enqueues) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	if len(kvs) > 0 {
		n()
	}
}

func (n enqueues) Apply(events []*clientv3.Event, _ int64) {
	for _, e := range events {
		if e.Type == clientv3.EventTypePut {
			n()
			return
		}
	}
}
