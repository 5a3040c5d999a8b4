package exportfmt_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// TestValidateRefusesWhatNoWorkerCouldExport: a spec is checked where it is
// enqueued, before any worker runs it; what Validate refuses is a 400 naming
// the field, and a destination URL never echoes credentials back.
func TestValidateRefusesWhatNoWorkerCouldExport(t *testing.T) {
	ok := []exportfmt.Spec{
		{Destination: "file:///data/exports/run-1"},
		{Destination: "s3://bucket?region=eu-west-1&prefix=exports/run-1/"},
		{Destination: "gs://bucket", Version: 12, Columns: []string{"id", "reward"}},
		{Destination: "azblob://container?prefix=x/", Filter: "reward > 0"},
	}
	for _, s := range ok {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, c := range []struct {
		spec exportfmt.Spec
		says string
	}{
		{exportfmt.Spec{}, "destination: missing"},
		{exportfmt.Spec{Destination: "/data/x"}, "no scheme"},
		{exportfmt.Spec{Destination: "mem://"}, "mem://"},
		{exportfmt.Spec{Destination: "ftp://host/x"}, `unknown scheme "ftp"`},
		{exportfmt.Spec{Destination: "s3://"}, "names no bucket"},
		{exportfmt.Spec{Destination: "file://"}, "names no directory"},
		{exportfmt.Spec{Destination: "s3://b?prefix=exports"}, `must end in "/"`},
		{exportfmt.Spec{Destination: "s3://key:secret@b"}, "credentials"},
		{exportfmt.Spec{Destination: "s3://b\x7f"}, "not a URL"},
		{exportfmt.Spec{Destination: "s3://b", Columns: []string{""}}, "columns[0]"},
		{exportfmt.Spec{Destination: "s3://b", Columns: []string{"_seq"}}, "reserved"},
		{exportfmt.Spec{Destination: "s3://b", Columns: []string{"a", "b", "a"}}, `"a" is named twice`},
		{exportfmt.Spec{Destination: "s3://b", Filter: strings.Repeat("x", 1<<20)}, "filter"},
	} {
		err := c.spec.Validate()
		if !errors.Is(err, exportfmt.ErrInvalidSpec) || errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%.80q: %v, want an invalid spec saying %s", c.spec.Destination, err, c.says)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the credentials: %v", err)
		}
	}
}

// TestParseManifestRefusesAnotherFormatAndWrongCounts: a reader (and a retry
// looking for its own commit) trusts a manifest's counts, so one whose counts
// are not its files' is no manifest.
func TestParseManifestRefusesAnotherFormatAndWrongCounts(t *testing.T) {
	good := `{"format":"tidemark-export/1","task_id":"t","rows":3,"bytes":30,"files":[{"path":"a","rows":1,"bytes":10},{"path":"b","rows":2,"bytes":20}]}`
	m, err := exportfmt.ParseManifest([]byte(good))
	if err != nil || m.Rows != 3 || len(m.Files) != 2 {
		t.Fatalf("%+v, %v", m, err)
	}
	for _, bad := range []string{
		`{"format":"tidemark-export/2","rows":0,"bytes":0}`,
		`{"rows":0}`,
		`{"format":"tidemark-export/1","rows":4,"bytes":30,"files":[{"path":"a","rows":1,"bytes":10},{"path":"b","rows":2,"bytes":20}]}`,
		`not json`,
	} {
		if _, err := exportfmt.ParseManifest([]byte(bad)); !errors.Is(err, exportfmt.ErrManifest) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
