package export

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// DefaultMaxFileBytes is where files are cut when Options.MaxFileBytes is 0: a few
// hundred MB, so parallel readers split an export by file.
const DefaultMaxFileBytes = 256 << 20

// cleanupTimeout bounds the best-effort deletes of a failed or cancelled attempt,
// which run after the attempt's own context ended.
const cleanupTimeout = 30 * time.Second

// Options says how Write writes an export.
type Options struct {
	// TaskID names the export: the manifest records it, and an attempt of the
	// same task id takes over what an earlier one left (see the package doc).
	TaskID string
	// Spec is the spec the scan was opened for (Open), recorded in the manifest.
	Spec Spec
	// FeedCursor is the change-feed cursor the manifest records; may be "".
	FeedCursor string
	// MaxFileBytes is where files are cut, about (DefaultMaxFileBytes when 0).
	MaxFileBytes int64
	// Progress, if set, is called after every row group and every file.
	Progress func(Progress)
	// Now is the clock of the manifest's created_at (time.Now when nil).
	Now func() time.Time
	// Logger logs what clean-up could not delete (discarded when nil).
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Progress == nil {
		o.Progress = func(Progress) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Write writes the rows of sc (opened by Open at the spec's version, columns and
// filter) to dst as Parquet files and then the manifest, and returns the
// manifest; target is the store sc reads. It follows the attempt rules of the
// package doc: a destination that already holds this task's manifest returns it
// unchanged, one holding anything else than this task's leftovers is
// ErrDestinationInUse. A cancelled ctx stops it promptly, without a manifest.
func Write(ctx context.Context, sc *store.Scan, target registry.Target, dst *objstore.Bucket, opts Options) (Manifest, error) {
	opts.setDefaults()
	if opts.TaskID == "" {
		return Manifest{}, errclass.Wrap(errclass.Invalid, errors.New("export: no task id"))
	}
	d := &destination{b: dst, task: opts.TaskID, log: opts.Logger}
	if m, ok, err := d.committed(ctx); err != nil || ok {
		if ok {
			d.cleanup(ctx, m)
		}
		return m, err
	}
	token, err := newToken()
	if err != nil {
		return Manifest{}, err
	}
	if err := d.claim(ctx, token, opts.Now()); err != nil {
		return Manifest{}, err
	}
	pw := newPartWriter(dst, sc, target, token, opts)
	files, err := pw.write(ctx)
	if err != nil {
		d.discard(ctx, pw.keys)
		return Manifest{}, err
	}
	m := Manifest{
		Format:     exportfmt.Format,
		Store:      target.Name,
		Kind:       string(target.Kind),
		Target:     target.String(),
		TaskID:     opts.TaskID,
		Version:    sc.Version(),
		Pinned:     opts.Spec.Version != 0,
		CreatedAt:  opts.Now().UTC(),
		Schema:     exportfmt.SchemaOf(sc.Schema()),
		Columns:    opts.Spec.Columns,
		Filter:     opts.Spec.Filter,
		Files:      files,
		FeedCursor: opts.FeedCursor,
	}
	if m.Columns == nil {
		m.Columns = []string{}
	}
	for _, f := range files {
		m.Rows += f.Rows
		m.Bytes += f.Bytes
	}
	committed, err := d.commit(ctx, m)
	switch {
	case errors.Is(err, ErrDestinationInUse):
		d.discard(ctx, pw.keys)
		return Manifest{}, err
	case err != nil:
		// The manifest may have landed (its outcome unknown): its files stay.
		return Manifest{}, err
	}
	d.cleanup(ctx, committed)
	return committed, nil
}

// newToken is an attempt's tag, in its files' names: random, so attempts that
// run at once (a zombie and its retry) never pick the same one.
func newToken() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("export: attempt token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// marshalManifest is the manifest's bytes, indented for the people who open it.
func marshalManifest(m Manifest) ([]byte, error) {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("export: manifest: %w", err)
	}
	return append(data, '\n'), nil
}
