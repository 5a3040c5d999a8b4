package exportfmt

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/data/rowfilter"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrInvalidSpec is what every error of Spec.Validate wraps: the request is
// wrong, so a route answers 400 and a task is not retried.
var ErrInvalidSpec = errclass.New(errclass.Invalid, "invalid export")

// Schemes are the destination URL schemes an export writes to: the object stores
// Tidemark runs on (package objstore), not mem://, whose bucket lives and dies
// with one process.
var Schemes = []string{"file", "s3", "gs", "azblob"}

// Spec is what a caller asks an export for. It is stored in the task record as
// JSON.
type Spec struct {
	// Destination is a bucket URL the workers can write (file://, s3://, gs://,
	// azblob://), with ?prefix=dir/ to write under a key prefix. The files and
	// _manifest.json go directly under it.
	Destination string `json:"destination"`
	// Version is the store's version to export: the rows merged by then. 0 is the
	// store now, merged and pending rows.
	Version uint64 `json:"version,omitempty"`
	// Columns are the columns exported besides id and _seq, which always are.
	// Empty: every column, blob columns included (an export is for training).
	Columns []string `json:"columns,omitempty"`
	// Filter keeps only the rows it matches: a generic store's SQL predicate (as
	// a list's filter=), a rollout store's JSON object of equalities (as a list's
	// filters=). Empty: every row.
	Filter string `json:"filter,omitempty"`
}

// Validate checks s without I/O: the destination parses, has a known scheme and
// names a bucket, without credentials; the columns are column names, each once;
// the filter is not over rowfilter's size bound. Errors wrap ErrInvalidSpec and
// name the field.
func (s Spec) Validate() error {
	if err := validateDestination(s.Destination); err != nil {
		return fmt.Errorf("%w: destination: %s", ErrInvalidSpec, err)
	}
	for i, c := range s.Columns {
		if err := schema.CheckColumnName(c); err != nil {
			return fmt.Errorf("%w: columns[%d] %q: %s", ErrInvalidSpec, i, c, err)
		}
		if slices.Contains(s.Columns[:i], c) {
			return fmt.Errorf("%w: columns: %q is named twice", ErrInvalidSpec, c)
		}
	}
	if len(s.Filter) > rowfilter.MaxBytes {
		return fmt.Errorf("%w: filter: %d bytes, at most %d", ErrInvalidSpec, len(s.Filter), rowfilter.MaxBytes)
	}
	return nil
}

// validateDestination checks a destination URL as far as that needs no I/O;
// objstore.Open checks each scheme's own parameters when the export opens it.
func validateDestination(raw string) error {
	if raw == "" {
		return fmt.Errorf("missing (a bucket URL: %s)", schemeList())
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the URL, credentials included: say only what failed.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.User != nil {
		return fmt.Errorf("credentials do not belong in the URL (it is stored in the task record); give the workers credentials in their environment")
	}
	switch {
	case u.Scheme == "":
		return fmt.Errorf("%q has no scheme (want %s)", raw, schemeList())
	case u.Scheme == "mem":
		return fmt.Errorf("mem:// is a bucket of one process, gone when it ends (want %s)", schemeList())
	case !slices.Contains(Schemes, u.Scheme):
		return fmt.Errorf("unknown scheme %q (want %s)", u.Scheme, schemeList())
	case u.Scheme == "file" && u.Path == "" && u.Opaque == "":
		return fmt.Errorf("%q names no directory (want file:///abs/dir)", raw)
	case u.Scheme != "file" && u.Host == "":
		return fmt.Errorf("%q names no bucket (want %s://bucket)", raw, u.Scheme)
	}
	if p := u.Query().Get("prefix"); p != "" && !strings.HasSuffix(p, "/") {
		return fmt.Errorf("prefix %q must end in \"/\": it names the directory the files go in", p)
	}
	return nil
}

func schemeList() string {
	parts := make([]string, len(Schemes))
	for i, s := range Schemes {
		parts[i] = s + "://"
	}
	return strings.Join(parts, ", ")
}

// Redact is a destination URL without its user info, for logs, task details and
// the dashboard: a destination is shown, its credentials never. A URL that does
// not parse is not shown at all.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User = nil
	return u.String()
}
