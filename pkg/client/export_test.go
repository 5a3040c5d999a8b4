package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/tidemark-io/tidemark/pkg/client"
)

// An export enqueued through the client with an id is enqueued once however
// often it is sent (the second answer says it existed), a bad request is an
// *Error naming the field, and the task is polled by its id.
func TestExportEnqueuesOnceByIDAndIsPolled(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, newWorker(t), client.WithToken(token))
	if _, err := c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: json.RawMessage(spec)}); err != nil {
		t.Fatal(err)
	}
	req := client.ExportRequest{Destination: "file://" + t.TempDir(), Columns: []string{"score"}, ID: uuid.NewString()}
	first, existing, err := c.Export(ctx, client.Generic, "g", req)
	if err != nil || existing || first.ID != req.ID || first.State != "queued" || first.Kind != "export" || first.Target != "generic:g" {
		t.Fatalf("Export = %+v (existing %v), %v", first, existing, err)
	}
	again, existing, err := c.Export(ctx, client.Generic, "g", req)
	if err != nil || !existing || again.ID != first.ID {
		t.Fatalf("Export again = %+v (existing %v), %v; want the first task", again, existing, err)
	}
	polled, err := c.GetExport(ctx, client.Generic, "g", first.ID)
	if err != nil || polled.ID != first.ID || polled.Finished() || polled.Export.Columns[0] != "score" {
		t.Fatalf("GetExport = %+v, %v", polled, err)
	}
	var ce *client.Error
	if _, _, err := c.Export(ctx, client.Generic, "g", client.ExportRequest{Destination: "ftp://x"}); !errors.As(err, &ce) || ce.Status != 400 {
		t.Errorf("a bad destination: %v; want a 400", err)
	}
	if _, err := c.GetExport(ctx, client.Generic, "g", uuid.NewString()); !client.IsNotFound(err) {
		t.Errorf("GetExport of an unknown id: %v; want not found", err)
	}
	if _, _, err := c.Export(ctx, client.Generic, "g", client.ExportRequest{Destination: req.Destination, ID: req.ID}); !errors.Is(err, client.ErrAlreadyExists) {
		t.Errorf("the id with another request: %v; want ErrAlreadyExists", err)
	}
}
