package membership

import (
	"context"
	"reflect"
	"testing"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// A record the master cannot call (it does not decode, or names no gRPC address)
// must not be listed: the master would otherwise call a guessed address.
func TestDiscoveryListsCallableRecordsInInstanceOrder(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ctx := context.Background()
	for key, value := range map[string]string{
		"/d/workers/w2":       `{"instance_id":"w2","grpc_addr":"10.0.0.2:9090","http_addr":"10.0.0.2:8080"}`,
		"/d/workers/w1":       `{"grpc_addr":"10.0.0.1:9090"}`,
		"/d/workers/garbage":  `not json`,
		"/d/workers/nogrpc":   `{"instance_id":"nogrpc","http_addr":"10.0.0.3:8080"}`,
		"/d/workers-old/w9":   `{"instance_id":"w9","grpc_addr":"10.0.0.9:9090"}`,
		"/other/workers/w1":   `{"instance_id":"x","grpc_addr":"10.0.0.8:9090"}`,
		"/d/tasks/not-worker": `{"instance_id":"t","grpc_addr":"10.0.0.7:9090"}`,
	} {
		if _, err := client.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	got, err := (&Discovery{Client: client, Prefix: "/d/"}).Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Worker{
		{InstanceID: "w1", GRPCAddr: "10.0.0.1:9090"}, // instance id from the key
		{InstanceID: "w2", GRPCAddr: "10.0.0.2:9090", HTTPAddr: "10.0.0.2:8080"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Workers = %+v, want %+v", got, want)
	}
}
