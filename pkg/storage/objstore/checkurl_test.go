package objstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// An export's destination is checked where the request enters (a 400 naming
// the problem), long before a worker opens it: CheckURL must agree with Open on
// what is malformed, touch nothing, and never echo credentials.
func TestCheckURLRefusesWhatOpenCannotOpen(t *testing.T) {
	dir := t.TempDir()
	for _, ok := range []string{"file://" + dir, "file://" + dir + "?prefix=exports/", "s3://bucket?region=us-east-1",
		"gs://bucket", "azblob://container", "mem://"} {
		if err := CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q) = %v; want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "bucket/dir", "ftp://host/dir", "file://host/dir", "file://" + dir + "?prefix=x",
		"file://" + dir + "?region=x", "http://user:secret@host/x", "%zz"} {
		err := CheckURL(bad)
		if !errors.Is(err, ErrBadURL) || errclass.Of(err) != errclass.Invalid {
			t.Errorf("CheckURL(%q) = %v; want ErrBadURL (Invalid)", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("CheckURL(%q) = %v: the error shows the URL's password", bad, err)
		}
	}
}
