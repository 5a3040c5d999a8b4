package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

// exact decodes a JSON value keeping numbers as written, so int64 values and float
// spellings compare exactly.
func exact(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

// buckets are the drivers the round trips run on.
var buckets = []struct {
	name string
	open func(testing.TB) *objstore.Bucket
}{{"mem", objstoretest.Mem}, {"file", objstoretest.File}}

// A record with every rollout column set, in the form the API writes back
// (floats exactly representable in float32, timestamps with six digits).
const fullRollout = `{"id":"rec-full","rollout_id":"ro-1","problem_id":"p-9","dataset":"gsm8k","sequence_order":3,` +
	`"role":"user","created_at":"2024-05-01T12:00:00.123456Z","content":"hello","content_type":"application/json",` +
	`"model_input_string":"in","model_output_string":"out","rationale":"why","problem_text":"2+2","user_metadata":"um",` +
	`"input_tokens":[1,2,3],"output_tokens":[4],"output_logprobs":[-0.25,-1.5],"input_logprobs":[null,-0.5],` +
	`"ref_logprobs":[],"loss_mask":[0,1],"num_input_tokens":3,"num_output_tokens":1,"advantage":0.5,"reward":1,` +
	`"raw_reward":-2.25,"score":0.125,"grader_id":"g","include_in_training":true,"exclude_reason":null,` +
	`"policy_version":"v7","relationships":[{"target_id":"rec-min","relation":"follows","weight":0.5},` +
	`{"target_id":"x","relation":"y","weight":null}],"binary_payload":"aGVsbG8=","payload_size":5,` +
	`"payload_checksum":"abc","artifact_type":"text","metadata":{"k":[1,2],"s":"t"}}`

func TestRolloutRoundTripAddFlushMergeGet(t *testing.T) {
	for _, b := range buckets {
		t.Run(b.name, func(t *testing.T) {
			e := newAPIEnv(t, b.open(t), "w1", nil)
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"rt"}`, nil)
			before := time.Now().Truncate(time.Microsecond)
			var added addAnswer
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/rt/records?flush=true",
				`{"records":[`+fullRollout+`,{"id":"rec-min","rollout_id":"ro-1"}]}`, &added)
			after := time.Now()
			if added.Count != 2 || !slices.Equal(added.IDs, []string{"rec-full", "rec-min"}) || added.Version != 1 || added.Seq == 0 {
				t.Fatalf("added %+v, want 2 records rec-full, rec-min at version 1", added)
			}

			// What the API must give back: the full record as written (metadata as the
			// JSON value it was), the minimal one with its defaults and nulls elsewhere;
			// binary_payload only through the blob route (lists and gets leave it out).
			wantFull := exact(t, []byte(fullRollout)).(map[string]any)
			delete(wantFull, schema.BinaryPayloadColumn)
			check := func(stage string, got map[string]any) {
				t.Helper()
				switch got["id"] {
				case "rec-full":
					if !reflect.DeepEqual(got, wantFull) {
						t.Errorf("%s: full record\n got %v\nwant %v", stage, got, wantFull)
					}
				case "rec-min":
					if len(got) != len(schema.Rollout().Fields())-1 {
						t.Errorf("%s: minimal record has %d keys, want every column but binary_payload", stage, len(got))
					}
					created, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["created_at"]))
					if err != nil || created.Before(before) || created.After(after) {
						t.Errorf("%s: created_at %v not the time of the add (%v..%v)", stage, got["created_at"], before, after)
					}
					for k, v := range got {
						want := map[string]any{"id": "rec-min", "rollout_id": "ro-1", "problem_id": "ro-1", "sequence_order": json.Number("0"),
							"role": schema.DefaultRole, "content_type": schema.DefaultContentType}[k]
						if k != "created_at" && v != want {
							t.Errorf("%s: minimal record %s = %v, want %v", stage, k, v, want)
						}
					}
				default:
					t.Errorf("%s: unexpected record %v", stage, got)
				}
			}
			verify := func(stage string) {
				t.Helper()
				rows := e.rows("rollouts", "rt")
				if len(rows) != 2 {
					t.Fatalf("%s: listed %d records, want 2", stage, len(rows))
				}
				for _, r := range rows {
					check(stage+" list", exact(t, r).(map[string]any))
				}
				for _, id := range []string{"rec-full", "rec-min"} {
					_, body := e.do(http.MethodGet, "/api/v1/rollouts/rt/records/"+id, nil)
					check(stage+" get", exact(t, body).(map[string]any)["record"].(map[string]any))
				}
				if _, body := e.do(http.MethodGet, "/api/v1/rollouts/rt/records/nope", nil); string(body) != "{\"record\":null}\n" {
					t.Errorf("%s: get of a missing record = %s", stage, body)
				}
				if status, _, _, body := e.blob("/api/v1/rollouts/rt/records/rec-full/blob"); status != http.StatusOK || string(body) != "hello" {
					t.Errorf("%s: blob of rec-full = %d %q, want hello", stage, status, body)
				}
				e.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/rollouts/rt/records/rec-min/blob", nil)
			}

			verify("flushed")
			if st := e.stats("rollouts", "rt").Stats; st.PendingGenerations != 1 || st.PendingRows != 2 || st.RowCount != 0 {
				t.Errorf("stats before merge = %+v", st)
			}
			var merged mergeAnswer
			e.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/rt", nil, &merged)
			if merged.Reclaimed != 1 || merged.Generations != 1 || merged.Rows != 2 || merged.Version == 0 {
				t.Errorf("merge = %+v", merged)
			}
			verify("merged")
			if got := e.stats("rollouts", "rt"); got.Stats.PendingGenerations != 0 || got.Stats.RowCount != 2 || *got.Store.Version != merged.Version {
				t.Errorf("stats after merge = %+v, version %d", got.Stats, *got.Store.Version)
			}

			m, ms := e.series, e.merges
			for name, c := range map[string]struct{ got, want int }{
				"appended rows":      {e.count(m.AppendedRows, "rollout"), 2},
				"flushes":            {e.count(ms.Flushes, mergesvc.ResultOK, "rollout"), 1},
				"request merges":     {e.count(ms.Merges, "request", "success"), 1},
				"merged generations": {e.count(ms.MergedGenerations, "rollout"), 1},
			} {
				if c.got != c.want {
					t.Errorf("%s metric = %d, want %d", name, c.got, c.want)
				}
			}
		})
	}
}

func TestGenericRoundTripAddFlushMergeGet(t *testing.T) {
	for _, b := range buckets {
		t.Run(b.name, func(t *testing.T) {
			bucket := b.open(t)
			e := newAPIEnv(t, bucket, "w1", nil)
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"gt","schema":`+apiSpec+`}`, nil)
			// 2^53+1 is not a float64: the int64 must survive exactly.
			first := []string{`{"id":"a","score":1.5,"n":9007199254740993,"tags":["x","y"]}`, `{"id":"b","n":-1}`}
			var added addAnswer
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gt/rows", `{"rows":[`+strings.Join(first, ",")+`]}`, &added)
			if added.Count != 2 || added.IDs != nil {
				t.Fatalf("added %+v", added)
			}
			if rows := e.rows("generic", "gt"); len(rows) != 0 {
				t.Errorf("unsealed rows are visible: %s", rows)
			}
			e.ok(http.StatusNoContent, http.MethodPost, "/api/v1/generic/gt/flush", nil, nil)
			if got := e.stats("generic", "gt").Stats; got.PendingGenerations != 1 || got.PendingRows != 2 {
				t.Errorf("after a flush: %+v, want one generation of 2 rows", got)
			}
			// Nothing left to seal: still 204.
			e.ok(http.StatusNoContent, http.MethodPost, "/api/v1/generic/gt/flush", nil, nil)

			want := map[string]any{
				"a": exact(t, []byte(`{"id":"a","score":1.5,"n":9007199254740993,"tags":["x","y"]}`)),
				"b": exact(t, []byte(`{"id":"b","score":null,"n":-1,"tags":null}`)),
			}
			verify := func(stage string, env *apiEnv) {
				t.Helper()
				rows := env.rows("generic", "gt")
				got := map[string]any{}
				for _, r := range rows {
					v := exact(t, r).(map[string]any)
					got[v["id"].(string)] = v
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: list\n got %v\nwant %v", stage, got, want)
				}
				for id, w := range want {
					var ans json.RawMessage
					env.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/gt/rows/"+id, nil, &ans)
					if g := exact(t, ans); !reflect.DeepEqual(g, w) {
						t.Errorf("%s: get %s = %v, want %v", stage, id, g, w)
					}
				}
				msg := env.fails(http.StatusNotFound, CodeNotFound, http.MethodGet, "/api/v1/generic/gt/rows/missing-id", nil)
				if msg != "Row 'missing-id' does not exist" {
					t.Errorf("%s: 404 message %q does not name the id", stage, msg)
				}
			}
			verify("flushed", e)
			// Sealed data is visible to every worker.
			verify("flushed, other worker", newAPIEnv(t, bucket, "w2", nil))

			// Last write wins, visible at once with ?flush=true.
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/gt/rows?flush=true", `{"rows":[{"id":"a","n":1}]}`, nil)
			want["a"] = exact(t, []byte(`{"id":"a","score":null,"n":1,"tags":null}`))
			verify("overwritten", e)

			var merged mergeAnswer
			e.ok(http.StatusOK, http.MethodPost, "/api/v1/generic/gt/merge-wal", nil, &merged)
			if merged.Reclaimed != 2 || merged.Generations != 2 {
				t.Errorf("merge = %+v", merged)
			}
			verify("merged", e)
			if st := e.stats("generic", "gt").Stats; st.PendingGenerations != 0 || st.RowCount != 2 {
				t.Errorf("stats after merge = %+v", st)
			}
			// Merging again finds nothing; the internal route takes a generic target.
			e.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/generic:gt", nil, &merged)
			if merged != (mergeAnswer{Passes: 1}) { // one pass, which found nothing
				t.Errorf("second merge = %+v", merged)
			}
			if got := e.count(e.merges.Merges, "request", "success"); got != 2 {
				t.Errorf("request merges counted %d, want 2", got)
			}
			if got := e.count(e.merges.MergedGenerations, "generic"); got != 2 {
				t.Errorf("merged generations counted %d, want 2", got)
			}
			if got := e.count(e.merges.Flushes, mergesvc.ResultOK, "generic"); got != 2 {
				t.Errorf("flushes counted %d, want 2 (the empty flush is not a seal)", got)
			}
		})
	}
}

func TestSealOnAddMakesRowsVisibleWithoutFlush(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"soa","seal_on_add":true,"schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/soa/rows", `{"rows":[{"id":"a","n":1}]}`, nil)
	if rows := e.rows("generic", "soa"); len(rows) != 1 {
		t.Errorf("listed %d rows after a seal-on-add, want 1", len(rows))
	}
}

func TestListPagesAndFiltersRollouts(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"pg"}`, nil)
	var recs []string
	for i := range 120 {
		ds := []string{"even", "odd"}[i%2]
		recs = append(recs, fmt.Sprintf(`{"id":"r%03d","rollout_id":"ro-%d","dataset":%q,"include_in_training":%t}`, i, i%3, ds, i%4 == 0))
	}
	// Two generations, so pages cross a generation boundary; merge one of them so
	// they cross from the base table into the pending rows too.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/pg/records?flush=true", `{"records":[`+strings.Join(recs[:70], ",")+`]}`, nil)
	e.ok(http.StatusOK, http.MethodPost, "/api/v1/internal/merge-wal/pg", nil, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/pg/records?flush=true", `{"records":[`+strings.Join(recs[70:], ",")+`]}`, nil)

	ids := func(query string) []string {
		t.Helper()
		var ans struct {
			Records []struct{ ID string }
			Count   int
		}
		e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/pg/records"+query, nil, &ans)
		if ans.Count != len(ans.Records) {
			t.Errorf("%s: count %d for %d records", query, ans.Count, len(ans.Records))
		}
		out := make([]string, len(ans.Records))
		for i, r := range ans.Records {
			out[i] = r.ID
		}
		return out
	}
	all := ids("?limit=10000")
	if len(all) != 120 {
		t.Fatalf("listed %d records, want 120", len(all))
	}
	// Without a limit: every record, in storage order.
	if got := ids(""); !reflect.DeepEqual(sorted(got), all) {
		t.Errorf("a list without a limit has %d records, want all 120", len(got))
	}
	for _, p := range []struct{ limit, offset int }{{3, 0}, {3, 2}, {10, 65}, {50, 100}, {5, 118}, {5, 120}, {5, 500}} {
		got := ids(fmt.Sprintf("?limit=%d&offset=%d", p.limit, p.offset))
		want := all[min(p.offset, len(all)):min(p.offset+p.limit, len(all))]
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("limit %d offset %d = %v, want %v", p.limit, p.offset, got, want)
		}
	}
	if got := ids("?limit=0"); len(got) != 0 {
		t.Errorf("limit=0 listed %d", len(got))
	}

	filter := func(f string) string { return "?limit=10000&filters=" + strings.ReplaceAll(f, `"`, "%22") }
	odd := ids(filter(`{"dataset":"odd"}`))
	if len(odd) != 60 || odd[0] != "r001" {
		t.Errorf("dataset=odd listed %d records starting %v", len(odd), odd[:min(1, len(odd))])
	}
	both := ids(filter(`{"dataset":"even","include_in_training":true}`))
	if len(both) != 30 {
		t.Errorf("dataset=even, include_in_training=true listed %d, want 30", len(both))
	}
	// problem_id defaults to rollout_id, so it filters like it.
	if got := ids(filter(`{"problem_id":"ro-2"}`)); len(got) != 40 {
		t.Errorf("problem_id=ro-2 listed %d, want 40", len(got))
	}
	// Offset and limit count matching rows only.
	if got := ids("?limit=2&offset=1&filters=" + strings.ReplaceAll(`{"dataset":"odd"}`, `"`, "%22")); !reflect.DeepEqual(got, odd[1:3]) {
		t.Errorf("filtered page = %v, want %v", got, odd[1:3])
	}
	if got := ids(filter(`{}`)); len(got) != 120 {
		t.Errorf("empty filters listed %d", len(got))
	}
}

// A client that gives up must not abandon a write the worker accepted: the append
// runs detached from the request, so the rows are acknowledged durable anyway.
func TestClientDisconnectDoesNotAbandonAnAcceptedAdd(t *testing.T) {
	faults := &objstore.Faults{}
	e := newAPIEnv(t, objstore.WithFaults(objstoretest.Mem(t), faults), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/r/records", `{"records":[{"id":"warm"}]}`, nil)

	faults.SetLatency(300*time.Millisecond, 0)
	impatient := &http.Client{Timeout: 50 * time.Millisecond}
	resp, err := impatient.Post(e.url+"/api/v1/rollouts/r/records", "application/json",
		strings.NewReader(`{"records":[{"id":"abandoned"}]}`))
	if err == nil {
		resp.Body.Close()
		t.Fatal("the add answered within 50ms despite 300ms of object-store latency")
	}
	waitFor(t, "the abandoned add to be acknowledged", func() bool { return e.count(e.series.AppendedRows, "rollout") == 2 })
	faults.SetLatency(0, 0)

	e.seal("rollout", "r")
	var ans map[string]json.RawMessage
	e.ok(http.StatusOK, http.MethodGet, "/api/v1/rollouts/r/records/abandoned", nil, &ans)
	if string(ans["record"]) == "null" {
		t.Error("the abandoned add's record is missing after a seal")
	}
}

// An add the object store failed was not acknowledged and is safe to send again:
// the client must be told so with a 503, not a bare 500 "internal error" (what a
// chaos run under 15% store errors saw for every failed add), and the retry, once
// the store answers, acknowledges the rows.
func TestAddFailedByTheStoreAnswers503AndTheRetrySucceeds(t *testing.T) {
	faults := &objstore.Faults{}
	e := newAPIEnv(t, objstore.WithFaults(objstoretest.Mem(t), faults), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)

	faults.SetErrorRate(1, objstore.OpPut, objstore.OpPutIfAbsent)
	msg := e.fails(http.StatusServiceUnavailable, CodeStoreUnavailable, http.MethodPost, "/api/v1/rollouts/r/records", `{"records":[{"id":"a"}]}`)
	if !strings.Contains(msg, "retry") {
		t.Errorf("message %q does not tell the client to retry", msg)
	}
	faults.SetErrorRate(0)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/r/records", `{"records":[{"id":"a"}]}`, nil)
	e.seal("rollout", "r")
	if got := len(e.rows("rollouts", "r")); got != 1 {
		t.Errorf("%d rows after the retry, want 1", got)
	}
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
