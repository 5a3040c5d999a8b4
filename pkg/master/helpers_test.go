package master

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// testLogger logs to the test's output at info level.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// get serves one request to h and returns its status, content type and body.
func get(t *testing.T, h http.Handler, method, path string) (int, string, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()
}

// createStores registers rollout store r1 and generic store g1 in b.
func createStores(t *testing.T, b *objstore.Bucket) { storetest.Create(t, b, "r1", "generic:g1") }

// fakeCaller answers MergeWal in process: a worker in fail answers its error, a
// known one merges its number of generations (5 rows each), and the others are
// unreachable.
type fakeCaller struct {
	mu    sync.Mutex
	calls []string // "<instance> <target> <token>"
	known map[string]int64
	fail  map[string]error
}

func (f *fakeCaller) MergeWal(_ context.Context, w fanout.Worker, target registry.Target, token int64) (fanout.MergeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %d", w.InstanceID, target, token))
	if err, ok := f.fail[w.InstanceID]; ok {
		return fanout.MergeResult{}, err
	}
	gens, ok := f.known[w.InstanceID]
	if !ok {
		return fanout.MergeResult{}, fmt.Errorf("%w: %s: connection refused", fanout.ErrUnreachable, w.GRPCAddr)
	}
	return fanout.MergeResult{Generations: gens, Rows: 5 * gens}, nil
}

// merges sets how many generations worker id merges from now on.
func (f *fakeCaller) merges(id string, gens int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known[id] = gens
}

// called returns the calls so far.
func (f *fakeCaller) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}
