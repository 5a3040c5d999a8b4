package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// fixedHorizons answers one horizon for every store.
type fixedHorizons uint64

func (h fixedHorizons) Horizon(context.Context, registry.Target) (uint64, bool, error) {
	return uint64(h), true, nil
}

// export calls Export and returns every message of its stream, or the error
// that ended it.
func (e *grpcEnv) export(t *testing.T, token int64, taskID string, spec *tidemarkv1.ExportSpec) ([]*tidemarkv1.ExportProgress, error) {
	t.Helper()
	stream, err := e.client.Export(context.Background(), &tidemarkv1.ExportRequest{Target: "generic:gs", FencingToken: token, TaskId: taskID, Spec: spec})
	if err != nil {
		return nil, err
	}
	var msgs []*tidemarkv1.ExportProgress
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
	}
}

// An export is admitted like a maintenance task (the maintenance lane's fencing
// tokens), streams its progress and ends with the manifest's summary: the live
// rows (an overwritten version never), the manifest's URL, and for an export of
// the store now the feed cursor after the horizon read before the snapshot; an
// export at a version records none. A bad spec is INVALID_ARGUMENT naming it,
// before anything is written.
func TestExportIsFencedStreamsProgressAndEndsWithTheManifest(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{horizons: fixedHorizons(41)})
	for _, id := range []string{"a", "b", "c"} {
		e.pending(t, e.generic, id)
	}
	merged, err := e.merge("generic:gs", 5)
	if err != nil {
		t.Fatal(err)
	}
	e.pending(t, e.generic, "b") // an overwrite, pending
	e.pending(t, e.generic, "d")

	dir := t.TempDir()
	dest := "file://" + dir + "?prefix=now/"
	msgs, err := e.export(t, 7, uuid.NewString(), &tidemarkv1.ExportSpec{Destination: dest})
	if err != nil {
		t.Fatal(err)
	}
	last := msgs[len(msgs)-1]
	if len(msgs) < 2 || !last.GetDone() || msgs[0].GetDone() || last.GetInstanceId() != "w1" {
		t.Fatalf("stream %v; want progress, then the summary", msgs)
	}
	if last.GetRows() != 4 || last.GetFiles() < 1 || last.GetBytes() <= 0 || last.GetVersion() != merged.GetBaseVersion() ||
		last.GetFeedCursor() != rowkey.After(41).Cursor() || last.GetManifest() != "file://"+filepath.Join(dir, "now", exportfmt.ManifestName) {
		t.Fatalf("summary %v", last)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "now", exportfmt.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	m, err := exportfmt.ParseManifest(raw)
	if err != nil || m.Rows != 4 || m.FeedCursor != last.GetFeedCursor() || m.Target != "generic:gs" {
		t.Fatalf("manifest %+v, %v", m, err)
	}

	at := "file://" + dir + "?prefix=v/"
	msgs, err = e.export(t, 7, uuid.NewString(), &tidemarkv1.ExportSpec{Destination: at, Version: merged.GetBaseVersion()})
	if err != nil {
		t.Fatal(err)
	}
	if last := msgs[len(msgs)-1]; last.GetRows() != 3 || last.GetFeedCursor() != "" {
		t.Errorf("export at version %d: %v; want its 3 rows and no feed cursor", merged.GetBaseVersion(), last)
	}

	_, err = e.export(t, 6, uuid.NewString(), &tidemarkv1.ExportSpec{Destination: "file://" + dir + "?prefix=stale/"})
	wantCode(t, err, codes.FailedPrecondition, "6", "7")
	_, err = e.export(t, 0, uuid.NewString(), &tidemarkv1.ExportSpec{Destination: dest})
	wantCode(t, err, codes.InvalidArgument, "fencing_token")
	_, err = e.export(t, 8, "x", &tidemarkv1.ExportSpec{Destination: dest})
	wantCode(t, err, codes.InvalidArgument, "task_id")
	for _, bad := range []struct {
		spec *tidemarkv1.ExportSpec
		want string
	}{
		{&tidemarkv1.ExportSpec{Destination: "ftp://x/y"}, "ftp"},
		{&tidemarkv1.ExportSpec{Destination: "file://" + dir + "?prefix=c/", Columns: []string{"nope"}}, "nope"},
		{&tidemarkv1.ExportSpec{Destination: "file://" + dir + "?prefix=f/", Filter: "v >"}, "filter"},
		{&tidemarkv1.ExportSpec{Destination: "file://" + dir + "?prefix=x/", Version: 999}, "999"},
		{&tidemarkv1.ExportSpec{Destination: dest}, "destination"}, // another task's export is there
	} {
		_, err := e.export(t, 8, uuid.NewString(), bad.spec)
		wantCode(t, err, codes.InvalidArgument, bad.want)
	}
	for _, sub := range []string{"c", "f", "x", "stale"} {
		if _, err := os.Stat(filepath.Join(dir, sub, exportfmt.ManifestName)); err == nil {
			t.Errorf("a refused export wrote a manifest under %s/", sub)
		}
	}
	if n := testutil.ToFloat64(e.metrics.Exports.WithLabelValues("success")); n != 2 {
		t.Errorf("tidemark_exports_total{result=success} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(e.metrics.ExportedRows.WithLabelValues("generic")); n != 7 {
		t.Errorf("tidemark_export_rows_total{kind=generic} = %v, want 7", n)
	}
	var doc map[string]any
	if json.Unmarshal(raw, &doc) != nil || !strings.Contains(string(raw), `"task_id"`) {
		t.Errorf("manifest is not the documented JSON: %s", raw)
	}
}
