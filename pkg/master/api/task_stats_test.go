package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// everyStat is a tasks.Stats with each field set to a value of its own (1, 2, ...),
// so a field left out of a conversion, or two fields swapped, shows.
func everyStat() tasks.Stats {
	var s tasks.Stats
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		default:
			panic(fmt.Sprintf("tasks.Stats.%s: a %s, which everyStat does not fill", v.Type().Field(i).Name, f.Kind()))
		}
	}
	return s
}

// numbers decodes a JSON object of numbers (or of numbers as strings, as
// protojson writes 64-bit integers) into their decimal text by key.
func numbers(t *testing.T, data []byte) map[string]string {
	t.Helper()
	var raw map[string]any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// A task's stats reach the AdminService (master admin tasks -o json) and the
// HTTP task API with the values and the names of the etcd record, every field of
// them; a task without stats answers a TaskStats of zeros on the AdminService,
// so every task has one shape there, and no "stats" key over HTTP.
func TestTaskStatsKeepTheirNamesThroughAdminAndHTTP(t *testing.T) {
	s := everyStat()
	record, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := numbers(t, record)
	if n := reflect.TypeFor[tasks.Stats]().NumField(); len(want) != n {
		t.Fatalf("the record has %d stats, tasks.Stats %d fields: %s", len(want), n, record)
	}

	admin, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(TaskProto(tasks.Task{ID: "t1", Stats: s}).GetStats())
	if err != nil {
		t.Fatal(err)
	}
	if got := numbers(t, admin); !reflect.DeepEqual(got, want) {
		t.Errorf("AdminService stats %v, want the record's %v", got, want)
	}
	if empty := TaskProto(tasks.Task{ID: "t1"}).GetStats(); empty == nil || empty.GetGenerationsMerged() != 0 {
		t.Errorf("a task without stats converts to %v, want a TaskStats of zeros", empty)
	}

	body, err := json.Marshal(NewTaskRecord(tasks.Task{ID: "t1", Stats: s}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Stats json.RawMessage `json:"stats"`
	}
	if err := json.Unmarshal(body, &got); err != nil || !reflect.DeepEqual(numbers(t, got.Stats), want) {
		t.Errorf("HTTP task %s (%v), want the record's stats %s", body, err, record)
	}
	if body, _ := json.Marshal(NewTaskRecord(tasks.Task{ID: "t1"})); strings.Contains(string(body), `"stats"`) {
		t.Errorf("HTTP task without stats: %s, want no stats key", body)
	}
}
