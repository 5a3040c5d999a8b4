package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "A_b-c.d", "_x", "0", strings.Repeat("n", 128)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want ok", ok, err)
		}
	}
	for _, bad := range []string{"", "../x", "a/b", "a:b", ".x", "-x", "_registry", "_stats", "a b", "é", strings.Repeat("n", 129), "a\x00"} {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string][2]string{
		"foo":        {"rollout", "foo"},
		"generic:gs": {"generic", "gs"},
		"generic_x":  {"rollout", "generic_x"},
		"_x":         {"rollout", "_x"},
	} {
		got, err := ParseTarget(in)
		if err != nil || string(got.Kind) != want[0] || got.Name != want[1] {
			t.Errorf("ParseTarget(%q) = %s %s %v, want %v", in, got.Kind, got.Name, err, want)
		}
		if got.String() != in {
			t.Errorf("%#v.String() = %q, want %q", got, got.String(), in)
		}
	}
	for _, bad := range []string{"", "generic:", "a/b", "generic:../x", "rollout:x", "generic:a:b"} {
		if _, err := ParseTarget(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseTarget(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

// TestTargetTextRoundTrips: a target's text is today's string ("<name>",
// "generic:<name>"), and ParseTarget gives back the same value.
func TestTargetTextRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		target Target
		text   string
	}{
		{NewTarget(KindRollout, "demo"), "demo"},
		{NewTarget(KindGeneric, "demo"), "generic:demo"},
		{NewTarget(KindRollout, "generic_x"), "generic_x"},
		{NewTarget(KindGeneric, "a.b-c_9"), "generic:a.b-c_9"},
		{NewTarget(KindRollout, strings.Repeat("n", 128)), strings.Repeat("n", 128)},
	} {
		if got := tc.target.String(); got != tc.text {
			t.Errorf("%#v.String() = %q, want %q", tc.target, got, tc.text)
		}
		back, err := ParseTarget(tc.text)
		if err != nil || back != tc.target {
			t.Errorf("ParseTarget(%q) = %#v, %v, want %#v", tc.text, back, err, tc.target)
		}
		if tc.target.IsZero() {
			t.Errorf("%#v.IsZero() = true", tc.target)
		}
	}
	if err := NewTarget(Kind("archive"), "x").Validate(); !errors.Is(err, ErrInvalidName) {
		t.Errorf("a target of an unknown kind validates: %v", err)
	}
	if NewTarget(KindRollout, "b").Compare(NewTarget(KindGeneric, "a")) >= 0 || MustParseTarget("generic:a") != NewTarget(KindGeneric, "a") {
		t.Error("targets do not order by their text (the order of their etcd keys)")
	}
	if !(Target{}).IsZero() || (Target{}).String() != "" {
		t.Errorf("the zero Target: IsZero %v, text %q", (Target{}).IsZero(), (Target{}).String())
	}
}

// TestTargetJSONIsTodaysString: a record holding a Target stores the same JSON
// string it stored when targets were strings, and decodes back to the same value.
func TestTargetJSONIsTodaysString(t *testing.T) {
	type record struct {
		Target Target `json:"target"`
		N      int    `json:"n"`
	}
	type legacy struct {
		Target string `json:"target"`
		N      int    `json:"n"`
	}
	for _, tc := range []struct {
		target Target
		text   string
	}{
		{NewTarget(KindRollout, "demo"), "demo"},
		{NewTarget(KindGeneric, "gs"), "generic:gs"},
	} {
		got, err := json.Marshal(record{Target: tc.target, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(legacy{Target: tc.text, N: 1})
		if string(got) != string(want) {
			t.Errorf("JSON of %#v = %s, want %s", tc.target, got, want)
		}
		var back record
		if err := json.Unmarshal(want, &back); err != nil || back.Target != tc.target {
			t.Errorf("decode %s = %#v, %v, want %#v", want, back.Target, err, tc.target)
		}
		// As a map key too (stats and dashboards key maps by target).
		m, err := json.Marshal(map[Target]int{tc.target: 1})
		if err != nil || string(m) != `{"`+tc.text+`":1}` {
			t.Errorf("JSON of a map keyed by %#v = %s, %v", tc.target, m, err)
		}
	}
}

// TestTargetRefusesInvalidNames: ParseTarget and a record's decode refuse what
// ParseTarget refused when targets were strings, with the same message.
func TestTargetRefusesInvalidNames(t *testing.T) {
	for _, tc := range []struct{ text, msg string }{
		{"", `target "": invalid store name "": empty`},
		{"generic:", `target "generic:": invalid store name "": empty`},
		{"a/b", `target "a/b": invalid store name "a/b": character '/' not allowed (use A-Z a-z 0-9 . _ -)`},
		{"generic:../x", `target "generic:../x": invalid store name "../x": must start with a letter, digit or '_'`},
		{"rollout:x", `target "rollout:x": invalid store name "rollout:x": character ':' not allowed (use A-Z a-z 0-9 . _ -)`},
		{"generic:a:b", `target "generic:a:b": invalid store name "a:b": character ':' not allowed (use A-Z a-z 0-9 . _ -)`},
		{"_stats", `target "_stats": invalid store name "_stats": reserved`},
		{"x..", `target "x..": invalid store name "x..": must not end in ".."`},
		{"a__0xb", `target "a__0xb": invalid store name "a__0xb": must not contain "__0x"`},
	} {
		got, err := ParseTarget(tc.text)
		if !errors.Is(err, ErrInvalidName) || err.Error() != tc.msg || !got.IsZero() {
			t.Errorf("ParseTarget(%q) = %#v, %v, want ErrInvalidName %q", tc.text, got, err, tc.msg)
		}
		// A target made without parsing is refused the same way, with the same message.
		made := NewTarget(KindRollout, tc.text)
		if rest, ok := strings.CutPrefix(tc.text, "generic:"); ok {
			made = NewTarget(KindGeneric, rest)
		}
		if err := made.Validate(); !errors.Is(err, ErrInvalidName) || err.Error() != tc.msg {
			t.Errorf("%#v.Validate() = %v, want ErrInvalidName %q", made, err, tc.msg)
		}
		var rec struct {
			Target Target `json:"target"`
		}
		data, _ := json.Marshal(map[string]string{"target": tc.text})
		if err := json.Unmarshal(data, &rec); !errors.Is(err, ErrInvalidName) {
			t.Errorf("decode %s = %v, want ErrInvalidName", data, err)
		}
	}
}

func TestCreateGetListDelete(t *testing.T) {
	ctx := context.Background()
	r := New(objstoretest.Mem(t))
	if _, err := r.Create(ctx, Entry{Name: "r1", Kind: KindRollout}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, Entry{Name: "g1", Kind: KindGeneric, Schema: []byte(`{"columns":[]}`), SealOnAdd: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, Entry{Name: "r1", Kind: KindRollout}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v, want ErrExists", err)
	}
	// Kinds are separate namespaces.
	if _, err := r.Create(ctx, Entry{Name: "r1", Kind: KindGeneric}); err != nil {
		t.Fatalf("same name, other kind: %v", err)
	}
	g, err := r.Get(ctx, KindGeneric, "g1")
	if err != nil || !g.SealOnAdd || string(g.Schema) != `{"columns":[]}` || g.URI != "generic/g1" || g.Target() != NewTarget(KindGeneric, "g1") || g.Target().String() != "generic:g1" {
		t.Fatalf("get g1 = %+v, %v", g, err)
	}
	names, err := r.Names(ctx, KindRollout)
	if err != nil || fmt.Sprint(names) != "[r1]" {
		t.Fatalf("rollout names = %v, %v", names, err)
	}
	entries, err := r.List(ctx, KindGeneric)
	if err != nil || len(entries) != 2 {
		t.Fatalf("generic entries = %v, %v", entries, err)
	}
	if err := r.Delete(ctx, KindRollout, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, KindRollout, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if err := r.Delete(ctx, KindRollout, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := r.Get(ctx, KindRollout, "../x"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("get of a bad name: %v", err)
	}
}

// Workers race to create the same store; exactly one must win on every driver.
func TestConcurrentCreateHasOneWinner(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		r := New(open(t))
		var wins, exists int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := r.Create(ctx, Entry{Name: "s", Kind: KindRollout})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, ErrExists):
					exists++
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || exists != 7 {
			t.Fatalf("%d wins and %d ErrExists, want 1 and 7", wins, exists)
		}
	})
}
