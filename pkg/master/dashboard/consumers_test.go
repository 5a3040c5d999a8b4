package dashboard

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/coord/horizon"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// seqAt is a _seq its writer could have numbered at t (wal's hybrid clock:
// milliseconds above a 16-bit logical counter).
func seqAt(t time.Time) uint64 { return uint64(t.UnixMilli()) << 16 }

// A store's page lists its named consumers with their committed cursors, when
// they committed, and how many seconds each is behind the store's horizon: the
// cursors as the commit route keeps them in etcd, the horizon as a worker's
// shard published it, followed by the View the master runs. A store without
// consumers says so, and a dashboard built without them says it does not
// follow them.
func TestStorePageShowsConsumersAndTheirLagBehindTheHorizon(t *testing.T) {
	ctx := context.Background()
	var cursors *consumers.Cursors
	var keeper *horizon.Keeper
	e := newEnv(t, func(c *Config) {
		cursors = consumers.New(c.Client, c.Prefix)
		keeper = horizon.NewKeeper(c.Client, c.Prefix, "w1", nil, nil)
		view := horizon.NewView(c.Client, c.Prefix, nil, nil)
		viewCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); view.Run(viewCtx) }()
		t.Cleanup(func() { stop(); <-done })
		c.Consumers, c.Horizons = cursors, view
	})
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	demo := registry.MustParseTarget("demo")
	if _, err := keeper.Open(ctx, demo, "w1", 1); err != nil {
		t.Fatal(err)
	}
	if err := keeper.Publish(ctx, []horizon.Promise{{Target: demo, Shard: "w1", Epoch: 1, Seq: seqAt(t0.Add(90 * time.Second))}}); err != nil {
		t.Fatal(err)
	}
	for consumer, at := range map[string]time.Time{"trainer": t0, "evaluator": t0.Add(85 * time.Second)} {
		if _, err := cursors.Commit(ctx, demo, consumer, rowkey.Position{Seq: seqAt(at), ID: "r1"}); err != nil {
			t.Fatal(err)
		}
	}
	c := e.browser(t)
	e.login(t, c)

	row := func(body, consumer string) string {
		m := regexp.MustCompile(`<tr data-consumer="` + consumer + `">.*?</tr>`).FindString(body)
		return m
	}
	var body string
	testwait.For(t, 10*time.Second, "the store page to show the consumers' lags", func() (bool, string) {
		_, body = get(t, c, e.srv.URL+"/ui/stores/demo")
		tr := row(body, "trainer")
		return strings.Contains(tr, `<td class="num lag">90.0</td>`), tr
	})
	trainer := row(body, "trainer")
	cursor := rowkey.Position{Seq: seqAt(t0), ID: "r1"}.Cursor()
	if !strings.Contains(trainer, `title="`+cursor+`"`) || !strings.Contains(trainer, `<td class="mono">trainer</td>`) {
		t.Errorf("trainer's row %s; want its name and committed cursor %s", trainer, cursor)
	}
	if committed := regexp.MustCompile(`<td class="ts">([^<]*)</td>`).FindStringSubmatch(trainer); committed == nil || committed[1] == "-" {
		t.Errorf("trainer's row %s; want when it committed", trainer)
	}
	if ev := row(body, "evaluator"); !strings.Contains(ev, `<td class="num lag">5.0</td>`) {
		t.Errorf("evaluator's row %s; want a lag of 5.0 s", ev)
	}

	_, body = get(t, c, e.srv.URL+"/ui/stores/generic:events")
	if !strings.Contains(body, "No named consumer has committed a cursor in this store.") {
		t.Errorf("a store without consumers: the page does not say so")
	}
	plain := newEnv(t, nil)
	pc := plain.browser(t)
	plain.login(t, pc)
	if _, body := get(t, pc, plain.srv.URL+"/ui/stores/demo"); !strings.Contains(body, "does not follow the change feed's consumers") {
		t.Errorf("a dashboard without consumers: the store page does not say it shows none")
	}
}
