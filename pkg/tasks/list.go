package tasks

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListFilter selects tasks for List. Zero fields match everything.
type ListFilter struct {
	State  State
	Kind   Kind
	Target registry.Target
	// Limit is the page size: 0 means DefaultListLimit, at most MaxListLimit.
	Limit int
	// PageToken continues a previous List with the same filter; "" starts over.
	PageToken string
	// NewestFirst lists in reverse enqueue order; the default is enqueue order.
	NewestFirst bool
}

// List returns one page of tasks matching f, in enqueue order (or the reverse),
// and the token of the next page ("" when there is none). A page is short only
// at the end; a token is returned whenever more keys remain, so the page it
// leads to may be empty when none of them match.
//
// Queued and running tasks are read from their indexes, so listing the queue
// never scans finished tasks.
func (s *Queue) List(ctx context.Context, f ListFilter) ([]Task, string, error) {
	if f.State != "" {
		if _, err := ParseState(string(f.State)); err != nil {
			return nil, "", err
		}
	}
	if f.Kind != "" {
		if err := validateKind(f.Kind); err != nil {
			return nil, "", err
		}
	}
	if !f.Target.IsZero() {
		if err := validateTarget(f.Target); err != nil {
			return nil, "", err
		}
	}
	if f.PageToken != "" {
		if err := validateID("page token", f.PageToken); err != nil {
			return nil, "", err
		}
	}
	limit := f.Limit
	switch {
	case limit < 0:
		return nil, "", fmt.Errorf("%w: limit %d is negative", ErrInvalidArgument, limit)
	case limit == 0:
		limit = DefaultListLimit
	case limit > MaxListLimit:
		limit = MaxListLimit
	}

	prefix := s.keys.TasksPrefix()
	switch f.State {
	case StateQueued:
		prefix = s.keys.QueuePrefix()
	case StateRunning:
		prefix = s.keys.RunningPrefix()
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	from, to := prefix, end // the unread key range [from, to)
	if f.PageToken != "" {
		if f.NewestFirst {
			to = prefix + f.PageToken
		} else {
			from = prefix + f.PageToken + "\x00"
		}
	}
	order := clientv3.SortAscend
	if f.NewestFirst {
		order = clientv3.SortDescend
	}
	batch := max(limit, 64)

	var out []Task
	for {
		resp, err := s.client.Get(ctx, from, clientv3.WithRange(to),
			clientv3.WithSort(clientv3.SortByKey, order), clientv3.WithLimit(int64(batch)))
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", prefix, err)
		}
		for i, kv := range resp.Kvs {
			t, err := decodeTask(string(kv.Key), kv.Value)
			if err != nil {
				return nil, "", err
			}
			if (f.State != "" && t.State != f.State) || (f.Kind != "" && t.Kind != f.Kind) ||
				(!f.Target.IsZero() && t.Target != f.Target) {
				continue
			}
			out = append(out, t)
			if len(out) == limit {
				if i == len(resp.Kvs)-1 && !resp.More {
					return out, "", nil
				}
				return out, t.ID, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, "", nil
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if f.NewestFirst {
			to = last
		} else {
			from = last + "\x00"
		}
	}
}

// LiveIDs returns, by target, the id of the live task of kind as the enqueue
// deduplication keys (P/dedupe/<kind>/) record it: one range read, whatever the
// number of finished tasks. A key that outlived its task (a finish whose
// deduplication delete was lost) still shows until the next Enqueue of its target
// replaces it, so a caller takes the answer as "probably live".
func (s *Queue) LiveIDs(ctx context.Context, kind Kind) (map[registry.Target]string, error) {
	if err := validateKind(kind); err != nil {
		return nil, err
	}
	prefix := s.keys.Dedupe(string(kind), "")
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list live %s tasks: %w", kind, err)
	}
	out := make(map[registry.Target]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		// The key is where the target's text enters: parsed here, once. Enqueue
		// writes dedupe keys only of valid targets, so a key that names none was
		// not written by Tidemark; it is left out.
		target, err := registry.ParseTarget(string(kv.Key[len(prefix):]))
		if err != nil {
			continue
		}
		out[target] = string(kv.Value)
	}
	return out, nil
}
