package schema

import (
	"reflect"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

func TestParseRolloutFiltersRejectsUnknownKeysAndWrongTypes(t *testing.T) {
	for _, tc := range []struct{ name, filters, column, reason string }{
		{"unknown key", `{"dataset":"a","reward":1}`, "reward", `unknown filter key`},
		{"not a column", `{"colour":"red"}`, "colour", "unknown filter key"},
		{"id is not a filter", `{"id":"x"}`, "id", "unknown filter key"},
		{"string as number", `{"dataset":5}`, "dataset", "must be a string, got number 5"},
		{"string as null", `{"role":null}`, "role", "must be a string, got null"},
		{"bool as string", `{"include_in_training":"true"}`, "include_in_training", "must be a boolean"},
		{"list value", `{"policy_version":["v1"]}`, "policy_version", "must be a string"},
		{"duplicate", `{"role":"a","role":"b"}`, "role", "twice"},
		{"not an object", `["dataset"]`, "", "must be a JSON object"},
		{"malformed", `{"dataset":`, "", "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRolloutFilters(tc.filters)
			checkInputError(t, err, -1, tc.column, tc.reason)
		})
	}
}

func TestRolloutFiltersMatch(t *testing.T) {
	rec := decodeRollouts(t,
		`{"id":"a","rollout_id":"r1","dataset":"gsm8k","include_in_training":true,"policy_version":"v1"}`,
		`{"id":"b","rollout_id":"r1","problem_id":"p2","dataset":"gsm8k","include_in_training":false,"role":"user"}`,
		`{"id":"c","rollout_id":"r2","dataset":"math","artifact_type":"trace"}`,
		`{"id":"d","dataset":null,"content_type":"image/png"}`,
	)
	for _, tc := range []struct {
		filters string
		want    []bool
	}{
		{``, []bool{true, true, true, true}},
		{`  `, []bool{true, true, true, true}},
		{`{}`, []bool{true, true, true, true}},
		{`{"dataset":"gsm8k"}`, []bool{true, true, false, false}},
		{`{"dataset":"gsm8k","include_in_training":true}`, []bool{true, false, false, false}},
		{`{"include_in_training":false}`, []bool{false, true, false, false}},         // null matches neither
		{`{"rollout_id":"r1","problem_id":"r1"}`, []bool{true, false, false, false}}, // defaulted problem_id
		{`{"role":"assistant"}`, []bool{true, false, true, true}},                    // defaulted role
		{`{"content_type":"image/png"}`, []bool{false, false, false, true}},
		{`{"artifact_type":"trace"}`, []bool{false, false, true, false}},
		{`{"policy_version":"v1"}`, []bool{true, false, false, false}},
		{`{"dataset":""}`, []bool{false, false, false, false}},
	} {
		f, err := ParseRolloutFilters(tc.filters)
		if err != nil {
			t.Fatalf("%s: %v", tc.filters, err)
		}
		mask, err := f.Mask(rec)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(mask, tc.want) {
			t.Errorf("%s: mask %v, want %v", tc.filters, mask, tc.want)
		}
		for row, want := range tc.want {
			if got := f.Match(rec, row); got != want {
				t.Errorf("%s: Match(row %d) = %v", tc.filters, row, got)
			}
		}
	}
}

func TestRolloutFiltersOnABatchWithoutTheColumn(t *testing.T) {
	f, err := ParseRolloutFilters(`{"dataset":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	rec := decodeRows(t, mustSpec(t, `{"columns":[["id",{"type":"string"}],["dataset",{"type":"int32","nullable":true}]]}`), `{"id":"a","dataset":1}`)
	if _, err := f.Mask(rec); err == nil {
		t.Fatal("Mask on a batch whose dataset is int32 succeeded")
	}
	if f.Match(rec, 0) {
		t.Fatal("Match on a batch whose dataset is int32 matched")
	}
	idOnly := array.NewRecordBatch(arrow.NewSchema(rec.Schema().Fields()[:1], nil), rec.Columns()[:1], rec.NumRows())
	defer idOnly.Release()
	if _, err := f.Mask(idOnly); err == nil {
		t.Fatal("Mask on a batch without dataset succeeded")
	}
}

func TestRolloutFilterKeysAreRolloutColumns(t *testing.T) {
	want := []string{"rollout_id", "problem_id", "dataset", "policy_version", "role", "content_type", "artifact_type", "include_in_training"}
	if got := RolloutFilterKeys(); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
	for _, k := range want {
		if len(Rollout().FieldIndices(k)) != 1 {
			t.Errorf("%s is not a rollout column", k)
		}
	}
	f, _ := ParseRolloutFilters(`{"role":"user","include_in_training":true}`)
	if got := f.String(); got != `include_in_training=true role="user"` {
		t.Errorf("String() = %s", got)
	}
}

// Columns names what Mask reads, each once: a list reads those columns to
// filter, so one Mask needs beyond them would fail on the projected batch.
func TestRolloutFiltersColumnsAreWhatMaskReads(t *testing.T) {
	f, err := ParseRolloutFilters(`{"dataset":"gsm8k","include_in_training":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Columns(), []string{"dataset", "include_in_training"}; !slices.Equal(got, want) {
		t.Errorf("Columns() = %q, want %q", got, want)
	}
	if got := (Filters{}).Columns(); got != nil {
		t.Errorf("no filters: Columns() = %q, want none", got)
	}
}
