package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// BenchmarkTaskListPage measures GET /api/v1/tasks?limit=50 over a task history
// of 5,000 tasks, whose total costs a walk of every task, next to one store page
// of 50 (tasks.List, what a page token costs) in the same run, and reports the
// ratio.
func BenchmarkTaskListPage(b *testing.B) {
	const history = 5000
	client, _ := etcdtest.Start(b)
	ctx := context.Background()
	ts := tasks.New(client, "/bench")
	for i := range history {
		if _, _, err := ts.Enqueue(ctx, tasks.KindCompact, registry.MustParseTarget(fmt.Sprintf("r%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	bucket := objstoretest.Mem(b)
	sc := scanner.New(client, ts, bucket, scanner.StaticLease(1), scanner.Config{})
	admin, err := NewAdminService(AdminConfig{Tasks: ts, Scanner: sc, Registry: registry.New(bucket), Discovery: fanout.StaticDiscovery{}})
	if err != nil {
		b.Fatal(err)
	}
	h, err := NewHTTPHandler(HTTPConfig{Admin: admin, Tasks: ts, Scanner: sc, Discovery: fanout.StaticDiscovery{},
		Workers:   workerhttp.New(workerhttp.Config{Discovery: fanout.StaticDiscovery{}}),
		EtcdCheck: func(context.Context) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}

	pageStart := time.Now()
	for range b.N {
		if _, _, err := ts.List(ctx, tasks.ListFilter{Limit: 50, NewestFirst: true}); err != nil {
			b.Fatal(err)
		}
	}
	page := time.Since(pageStart)

	b.ResetTimer()
	start := time.Now()
	for range b.N {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/tasks?limit=50", nil))
		if rec.Code != 200 {
			b.Fatalf("GET /api/v1/tasks = %d %s", rec.Code, rec.Body)
		}
	}
	b.ReportMetric(float64(time.Since(start))/float64(page), "x_store_page")
}
