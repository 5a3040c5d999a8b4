package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// TestCausalTokensOrderWritesAcrossSkewedWorkers writes one id through workers
// whose clocks differ by 4 s, each write after the previous one's answer.
// Production failure: without a token the later write of an id got a lower _seq on
// the worker whose clock was behind and silently lost to the earlier one. With the
// token of the last answer it is ordered after it, and a read carrying a token sees
// the write it names through a worker whose snapshot was stale.
func TestCausalTokensOrderWritesAcrossSkewedWorkers(t *testing.T) {
	bucket := objstoretest.Mem(t)
	now := time.Now()
	worker := func(shard string, skew time.Duration) *apiEnv {
		return newAPIEnvWith(t, bucket, shard, func(c *store.Config) {
			c.SnapshotTTL = time.Hour // only tokens and own writes refresh a read's view
			c.WALOptions = append(c.WALOptions, wal.WithClock(clocktesting.NewFakeClock(now.Add(skew))))
		}, nil)
	}
	ahead, stale, behind := worker("ahead", 2*time.Second), worker("stale", 0), worker("behind", -2*time.Second)
	ahead.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"c","schema":`+apiSpec+`}`, nil)
	const rows = "/api/v1/generic/c/rows"
	stale.ok(http.StatusNotFound, http.MethodGet, rows+"/x", nil, nil) // stale's view: before any write

	t1 := add(t, ahead, 1, 0)
	stale.ok(http.StatusNotFound, http.MethodGet, rows+"/x", nil, nil) // its snapshot lives an hour
	wantN(t, stale, 1, "?after="+fmt.Sprint(t1))                       // read-your-writes with the token

	// Without the token, the later write loses to the earlier one: the skew is real.
	t2 := add(t, behind, 2, 0)
	if t2 >= t1 {
		t.Fatalf("blind write through the worker 4 s behind got _seq %d >= %d: the test's clocks are not skewed", t2, t1)
	}
	wantN(t, ahead, 1, "?after="+fmt.Sprint(t2))

	// With the token of the last answer it is ordered after it.
	t3 := add(t, behind, 3, t1)
	if t3 <= t1 {
		t.Fatalf("write after token %d got _seq %d", t1, t3)
	}
	wantN(t, ahead, 3, "?after="+fmt.Sprint(t3))
	wantN(t, stale, 3, "?after="+fmt.Sprint(t3))

	// A bad token is a 400 naming the parameter, before anything is written.
	status, body := ahead.do(http.MethodPost, rows+"?flush=true&after=soon", `{"rows":[{"id":"y","n":1}]}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "after") {
		t.Fatalf("bad token: %d %s", status, body)
	}
}

// add writes x=n through e with ?flush=true, carrying token after (0: none) in the
// header, and returns the answer's token after checking header and field agree.
func add(t *testing.T, e *apiEnv, n int, after uint64) uint64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/api/v1/generic/c/rows?flush=true", strings.NewReader(fmt.Sprintf(`{"rows":[{"id":"x","n":%d}]}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if after != 0 {
		req.Header.Set(httpjson.AfterHeader, strconv.FormatUint(after, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans addAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusCreated || ans.Count != 1 {
		t.Fatalf("add x=%d: %d %+v %v", n, resp.StatusCode, ans, err)
	}
	if h := resp.Header.Get(httpjson.SeqHeader); h != strconv.FormatUint(ans.Seq, 10) || ans.Seq == 0 {
		t.Fatalf("add x=%d: header %s=%q, field seq=%d", n, httpjson.SeqHeader, h, ans.Seq)
	}
	return ans.Seq
}

// wantN reads x through e with query and wants its n to be n.
func wantN(t *testing.T, e *apiEnv, n int64, query string) {
	t.Helper()
	var row struct {
		N int64 `json:"n"`
	}
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/c/rows/x"+query, nil, &row)
	if row.N != n {
		t.Fatalf("x through %s: n=%d, want %d", e.srv.cfg.InstanceID, row.N, n)
	}
}
