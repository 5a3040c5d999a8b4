package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrTaskNotFound means no task has the id: it never existed or was pruned.
var ErrTaskNotFound = errclass.New(errclass.Gone, "task not found")

// Default cooldown backoff of failing tasks (non-merge kinds, and halting failures
// of any kind: Result.Halt).
const (
	DefaultCooldownBase = 30 * time.Second
	DefaultCooldownMax  = 30 * time.Minute
)

// Clock tells the time. k8s.io/utils/clock.PassiveClock satisfies it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Queue is the master's task queue in etcd. It keeps no state of its own besides
// its options: every replica may use its own Queue on the same prefix at once.
type Queue struct {
	client *clientv3.Client
	keys   keys.Schema
	opts   options
}

type options struct {
	clock        Clock
	cooldownBase time.Duration
	cooldownMax  time.Duration
	logger       *slog.Logger
	holder       string
	onEnqueue    func(kind Kind, deduplicated bool)
}

// Option configures a Queue.
type Option func(*options)

// WithClock sets the clock used for timestamps and cooldowns (tests inject one).
// Leases still run on etcd's clock.
func WithClock(c Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithCooldown sets the backoff of failing tasks that cool down (see Cooldown): the
// n-th failure in a row of a kind+target blocks its claims for base*2^(n-1), at
// most maxDelay.
// Non-positive values keep the defaults.
func WithCooldown(base, maxDelay time.Duration) Option {
	return func(o *options) {
		if base > 0 {
			o.cooldownBase = base
		}
		if maxDelay > 0 {
			o.cooldownMax = maxDelay
		}
	}
}

// WithLogger sets the logger for recoveries and dependency failures.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithHolder names this replica in claim tokens and coordination keys, so an
// operator reading etcd sees who holds what. The default is "<hostname>:<pid>".
func WithHolder(name string) Option {
	return func(o *options) {
		if name != "" {
			o.holder = name
		}
	}
}

// WithOnEnqueue sets a function told of every successful Enqueue (for the
// master_task_enqueued_total metric): the task's kind, and whether it returned
// the live task of its kind and target instead of adding one.
func WithOnEnqueue(f func(kind Kind, deduplicated bool)) Option {
	return func(o *options) { o.onEnqueue = f }
}

// New returns the task queue under prefix ("" means DefaultPrefix).
func New(client *clientv3.Client, prefix string, opts ...Option) *Queue {
	host, _ := os.Hostname()
	o := options{
		clock:        realClock{},
		cooldownBase: DefaultCooldownBase,
		cooldownMax:  DefaultCooldownMax,
		logger:       slog.Default(),
		holder:       fmt.Sprintf("%s:%d", host, os.Getpid()),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.cooldownMax < o.cooldownBase {
		o.cooldownMax = o.cooldownBase
	}
	return &Queue{client: client, keys: keys.Under(prefix), opts: o}
}

// Prefix is the store's key prefix, without a trailing slash.
func (s *Queue) Prefix() string { return s.keys.Prefix() }

// Keys is the key schema under the store's prefix.
func (s *Queue) Keys() keys.Schema { return s.keys }

// lock is the key of the lock t runs under: its target's lock of t's lane.
func (s *Queue) lock(t Task) string {
	if t.Kind.Lane() == LaneMaintenance {
		return s.keys.MaintenanceLock(t.Target.String())
	}
	return s.keys.Lock(t.Target.String())
}

func (s *Queue) now() time.Time { return s.opts.clock.Now().UTC() }

func encodeTask(t Task) string {
	data, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("tasks: encode task %s: %v", t.ID, err)) // only plain fields
	}
	return string(data)
}

func decodeTask(key string, value []byte) (Task, error) {
	var t Task
	if err := json.Unmarshal(value, &t); err != nil {
		return Task{}, fmt.Errorf("task record %s: corrupt: %w", key, err)
	}
	return t, nil
}

// getTask reads a task with the mod revision its record has.
func (s *Queue) getTask(ctx context.Context, id string) (Task, int64, error) {
	key := s.keys.Task(id)
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return Task{}, 0, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Task{}, 0, fmt.Errorf("task %s: %w", id, ErrTaskNotFound)
	}
	t, err := decodeTask(key, resp.Kvs[0].Value)
	return t, resp.Kvs[0].ModRevision, err
}

// Get returns the task with the id, or ErrTaskNotFound.
func (s *Queue) Get(ctx context.Context, id string) (Task, error) {
	if err := validateID("task id", id); err != nil {
		return Task{}, err
	}
	t, _, err := s.getTask(ctx, id)
	return t, err
}

// QueueDepth is the number of queued tasks (for metrics).
func (s *Queue) QueueDepth(ctx context.Context) (int64, error) {
	resp, err := s.client.Get(ctx, s.keys.QueuePrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", s.keys.QueuePrefix(), err)
	}
	return resp.Count, nil
}
