package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestStoreRoutesCreateListGetDeleteBothKinds(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	for _, tc := range []struct {
		path   string
		kind   registry.Kind
		create map[string]any
		target string
	}{
		{"rollouts", registry.KindRollout, map[string]any{"name": "r1"}, "r1"},
		{"generic", registry.KindGeneric, map[string]any{"name": "g1", "schema": json.RawMessage(apiSpec), "seal_on_add": true}, "generic:g1"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			name := tc.create["name"].(string)
			before := time.Now().Add(-time.Second)
			var got storeInfo
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/"+tc.path, tc.create, &got)
			if got.Name != name || got.Kind != tc.kind || got.Target != tc.target || got.CreatedAt.Before(before) ||
				got.Version == nil || *got.Version != 1 || !strings.HasPrefix(got.URI, "mem://") || !strings.Contains(got.URI, "/"+string(tc.kind)+"/"+name+"@") {
				t.Errorf("created %+v", got)
			}
			if tc.kind == registry.KindGeneric {
				if got.SealOnAdd == nil || !*got.SealOnAdd || len(got.Schema) == 0 {
					t.Errorf("generic store answer lacks schema or seal_on_add: %+v", got)
				}
			} else if got.Schema != nil || got.SealOnAdd != nil {
				t.Errorf("rollout store answer has generic fields: %+v", got)
			}

			var list struct{ Stores []storeInfo }
			e.ok(http.StatusOK, http.MethodGet, "/api/v1/"+tc.path, nil, &list)
			if len(list.Stores) != 1 || list.Stores[0].Name != name || !list.Stores[0].CreatedAt.Equal(got.CreatedAt) ||
				list.Stores[0].URI != got.URI || list.Stores[0].Version != nil {
				t.Errorf("list = %+v", list.Stores)
			}

			ans := e.stats(tc.path, name)
			if ans.Store.Target != tc.target || ans.Store.URI != got.URI || *ans.Store.Version != 1 || ans.Stats.RowCount != 0 || ans.Stats.PendingGenerations != 0 {
				t.Errorf("get = %+v %+v", ans.Store, ans.Stats)
			}

			e.ok(http.StatusNoContent, http.MethodDelete, "/api/v1/"+tc.path+"/"+name, nil, nil)
			gone := map[registry.Kind]string{registry.KindRollout: "Rollout", registry.KindGeneric: "Generic"}[tc.kind] + " store '" + name + "' does not exist"
			for _, method := range []string{http.MethodGet, http.MethodDelete} {
				if msg := e.fails(http.StatusNotFound, CodeNotFound, method, "/api/v1/"+tc.path+"/"+name, nil); msg != gone {
					t.Errorf("%s after delete: %q, want %q", method, msg, gone)
				}
			}
			e.ok(http.StatusOK, http.MethodGet, "/api/v1/"+tc.path, nil, &list)
			if len(list.Stores) != 0 {
				t.Errorf("list after delete = %+v", list.Stores)
			}
			// The name is free again.
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/"+tc.path, tc.create, nil)
		})
	}
}

func TestListStoresAnswersAnEmptyArrayNotNull(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	for _, path := range []string{"/api/v1/rollouts", "/api/v1/generic"} {
		if _, body := e.do(http.MethodGet, path, nil); string(body) != "{\"stores\":[]}\n" {
			t.Errorf("GET %s = %s", path, body)
		}
	}
}

func TestGenericStoreAnswersItsCanonicalSchema(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	// The same spec spelled with defaults and another key order.
	spelled := `{"columns":[["id",{"type":"string","nullable":false}],["v",{"type":"vector","dim":2}]]}`
	canonical := `{"columns":[["id",{"type":"string","nullable":false}],["v",{"type":"vector","dim":2,"nullable":true}]]}`
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"vec","schema":`+spelled+`}`, nil)
	ans := e.stats("generic", "vec")
	if string(ans.Store.Schema) != canonical {
		t.Errorf("schema = %s, want %s", ans.Store.Schema, canonical)
	}
	if ans.Store.SealOnAdd == nil || *ans.Store.SealOnAdd {
		t.Errorf("seal_on_add = %v, want false", ans.Store.SealOnAdd)
	}
}

func TestDuplicateCreateIsAlreadyExists(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"dup"}`, nil)
	if msg := e.fails(http.StatusConflict, CodeAlreadyExists, http.MethodPost, "/api/v1/rollouts", `{"name":"dup"}`); msg != "Rollout store 'dup' already exists" {
		t.Errorf("message %q", msg)
	}
	// Each kind has its own names: a generic store may be called "dup" too.
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"dup","schema":`+apiSpec+`}`, nil)
	// A generic create of an existing name conflicts whatever the schema says.
	e.fails(http.StatusConflict, CodeAlreadyExists, http.MethodPost, "/api/v1/generic",
		`{"name":"dup","schema":{"columns":[["id",{"type":"string"}]]}}`)
}
