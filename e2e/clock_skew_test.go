package e2e

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// TestCausalTokensOrderWritesThroughSkewedWorkers writes one id again and again,
// each write after the previous one's answer, alternately through a worker whose
// clock runs 2 s ahead and one 2 s behind, and reads it through a third worker
// after each write. Production failure: the later write through the worker that is
// behind got the lower _seq and silently lost to the earlier one. Clients that pass
// the causal token of their last answer see no reordering; without it the test
// reports how many writes were reordered (and needs some, or its clocks are not
// skewed and it proves nothing).
func TestCausalTokensOrderWritesThroughSkewedWorkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	bin := chaosWorker(t)
	ahead := c.startWorkerWith("ahead", bin, map[string]string{chaos.ClockOffsetEnv: "2s"})
	behind := c.startWorkerWith("behind", bin, map[string]string{chaos.ClockOffsetEnv: "-2s"})
	reader := c.startWorker("reader")
	const name = "skew"
	if code, body, err := postWith(http.DefaultClient, ahead.url()+"/api/v1/rollouts", "", `{"name":"`+name+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	records := "/api/v1/rollouts/" + name + "/records"

	const rounds = 20
	reorderings := func(id string, tokens bool) int {
		var token uint64
		reordered := 0
		for i := 1; i <= rounds; i++ {
			via := []*workerProc{ahead, behind}[i%2]
			after := uint64(0)
			if tokens {
				after = token
			}
			seq := addWithToken(t, via.url()+records+"?flush=true", record(id, i), after)
			token = max(token, seq)
			// The reader passes the token only to see every flushed write (it never
			// writes, so its clock does not matter).
			got, ok, err := getValue(reader.url()+records, id, "?after="+strconv.FormatUint(token, 10))
			if err != nil || !ok {
				t.Fatalf("read %s after write %d: %v %v", id, i, ok, err)
			}
			if got != i {
				reordered++
			}
		}
		return reordered
	}
	blind := reorderings("blind", false)
	t.Logf("without tokens: %d of %d sequential writes through workers 4 s apart were reordered", blind, rounds)
	if blind == 0 {
		t.Fatal("no write was reordered without tokens: the workers' clocks are not skewed, so the test proves nothing")
	}
	if n := reorderings("causal", true); n != 0 {
		t.Fatalf("with tokens: %d of %d sequential writes were reordered", n, rounds)
	}
}

// addWithToken POSTs body to u carrying token after (0: none) and returns the
// answer's token.
func addWithToken(t *testing.T, u, body string, after uint64) uint64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"records":[`+body+`]}`))
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
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, out)
	}
	seq, err := strconv.ParseUint(resp.Header.Get(httpjson.SeqHeader), 10, 64)
	if err != nil {
		t.Fatalf("POST %s: %s header %q: %v", u, httpjson.SeqHeader, resp.Header.Get(httpjson.SeqHeader), err)
	}
	return seq
}
