package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// ErrDestinationInUse means the destination holds another export (committed or
// not) or objects Tidemark did not write: an export never writes beside them.
// Choose another destination (or empty this one); retrying does not help.
var ErrDestinationInUse = errclass.New(errclass.Invalid, "export destination in use")

// markerName is the key of the marker an attempt writes before its files: which
// task the destination's files belong to until a manifest says so.
const markerName = "_export.json"

// maxManifestBytes bounds the read of a manifest or marker: a manifest lists a
// few thousand files at most.
const maxManifestBytes = 64 << 20

// partPattern matches the names of the files partName makes.
var partPattern = regexp.MustCompile(`^part-[0-9]{5,}-[0-9a-f]{8}\.parquet$`)

// partName is the key of an attempt's n-th file.
func partName(token string, n int) string { return fmt.Sprintf("part-%05d-%s.parquet", n, token) }

// marker is the _export.json an attempt writes when it claims the destination.
type marker struct {
	Format    string    `json:"format"`
	TaskID    string    `json:"task_id"`
	Attempt   string    `json:"attempt"` // the attempt's token, in its files' names
	StartedAt time.Time `json:"started_at"`
}

// destination is one attempt's view of the bucket it exports to.
type destination struct {
	b     *objstore.Bucket
	task  string
	token string // once claimed
	log   *slog.Logger
}

// committed returns the destination's manifest if it is this task's (rule 1 of
// the package doc): ok false and no error when there is none.
func (d *destination) committed(ctx context.Context) (m Manifest, ok bool, err error) {
	data, err := d.b.GetMax(ctx, exportfmt.ManifestName, maxManifestBytes)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return Manifest{}, false, nil
	case errors.Is(err, objstore.ErrTooLarge):
		return Manifest{}, false, fmt.Errorf("%w: %s holds a %s that is no export manifest (over %d bytes)", ErrDestinationInUse, d.b, exportfmt.ManifestName, maxManifestBytes)
	case err != nil:
		return Manifest{}, false, fmt.Errorf("export: read %s: %w", exportfmt.ManifestName, err)
	}
	m, err = exportfmt.ParseManifest(data)
	switch {
	case err != nil:
		return Manifest{}, false, fmt.Errorf("%w: %s holds a %s that is no export manifest: %v", ErrDestinationInUse, d.b, exportfmt.ManifestName, err)
	case m.TaskID != d.task:
		return Manifest{}, false, fmt.Errorf("%w: %s holds the export of task %s", ErrDestinationInUse, d.b, m.TaskID)
	}
	return m, true, nil
}

// claim checks that the destination holds nothing but this task's leftovers
// (rule 2) and writes the marker of the attempt token.
func (d *destination) claim(ctx context.Context, token string, now time.Time) error {
	var parts, foreign []string
	hasMarker := false
	// The walk's callback makes no request: a retrying bucket holds a slot of its
	// concurrency limit for the whole walk.
	err := d.b.Walk(ctx, "", "/", func(o objstore.Object) error {
		switch {
		case o.Key == markerName:
			hasMarker = true
		case o.Key == exportfmt.ManifestName:
			// Committed since committed() looked: the commit's put-if-absent finds
			// it and decides (rule 4).
		case !o.IsDir && partPattern.MatchString(o.Key):
			parts = append(parts, o.Key)
		default:
			foreign = append(foreign, o.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("export: list %s: %w", d.b, err)
	}
	var mk *marker
	if hasMarker {
		if mk, err = d.readMarker(ctx); err != nil {
			return err
		}
	}
	switch {
	case len(foreign) > 0:
		return fmt.Errorf("%w: %s holds %q, which no export wrote: export to an empty destination", ErrDestinationInUse, d.b, foreign[0])
	case mk != nil && mk.TaskID != d.task:
		return fmt.Errorf("%w: %s holds the files of export task %s (not committed: running, failed or cancelled)", ErrDestinationInUse, d.b, mk.TaskID)
	case mk == nil && len(parts) > 0:
		return fmt.Errorf("%w: %s holds %q but no %s naming its task", ErrDestinationInUse, d.b, parts[0], markerName)
	}
	data, err := json.Marshal(marker{Format: exportfmt.Format, TaskID: d.task, Attempt: token, StartedAt: now.UTC()})
	if err != nil {
		return err
	}
	if err := d.b.Put(ctx, markerName, data); err != nil {
		return fmt.Errorf("export: claim %s: %w", d.b, err)
	}
	d.token = token
	return nil
}

// readMarker reads the destination's marker; one that is not a marker is
// ErrDestinationInUse.
func (d *destination) readMarker(ctx context.Context) (*marker, error) {
	data, err := d.b.GetMax(ctx, markerName, maxManifestBytes)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil, nil
	case errors.Is(err, objstore.ErrTooLarge):
		return nil, fmt.Errorf("%w: %s holds a %s that is no export marker", ErrDestinationInUse, d.b, markerName)
	case err != nil:
		return nil, fmt.Errorf("export: read %s: %w", markerName, err)
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil || m.Format != exportfmt.Format || m.TaskID == "" {
		return nil, fmt.Errorf("%w: %s holds a %s that is no export marker", ErrDestinationInUse, d.b, markerName)
	}
	return &m, nil
}

// commit creates the manifest if absent (rule 4) and returns the manifest the
// destination holds then: m, or the one an attempt of the same task committed
// first. A manifest of another task is ErrDestinationInUse. Any other error
// leaves open whether m landed: the caller must not delete its files.
func (d *destination) commit(ctx context.Context, m Manifest) (Manifest, error) {
	data, err := marshalManifest(m)
	if err != nil {
		return Manifest{}, err
	}
	err = d.b.PutIfAbsent(ctx, exportfmt.ManifestName, data)
	if err == nil {
		return m, nil
	}
	// Lost to another commit, or a write whose outcome is unknown: what the
	// destination holds decides.
	got, ok, rerr := d.committed(ctx)
	switch {
	case ok:
		return got, nil
	case rerr != nil:
		return Manifest{}, rerr
	}
	return Manifest{}, fmt.Errorf("export: commit %s: %w", d.b, err)
}

// cleanup deletes, after a commit, the part files m does not list and the
// marker (rule 5). Best effort: what it cannot delete is logged.
func (d *destination) cleanup(ctx context.Context, m Manifest) {
	listed := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		listed[f.Path] = true
	}
	var stray []string
	err := d.b.Walk(ctx, "", "/", func(o objstore.Object) error {
		if !o.IsDir && partPattern.MatchString(o.Key) && !listed[o.Key] {
			stray = append(stray, o.Key)
		}
		return nil
	})
	if err != nil {
		d.log.Warn("export: clean-up could not list the destination", "destination", d.b.String(), "task", d.task, "err", err)
		return
	}
	d.delete(ctx, append(stray, markerName))
}

// discard deletes a failed attempt's own files, and its marker if no other
// attempt replaced it, under a context of its own: the attempt's may have ended.
func (d *destination) discard(ctx context.Context, keys []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if d.token != "" {
		if mk, err := d.readMarker(ctx); err == nil && mk != nil && mk.Attempt == d.token {
			keys = append(keys, markerName)
		}
	}
	d.delete(ctx, keys)
}

func (d *destination) delete(ctx context.Context, keys []string) {
	for _, k := range keys {
		if err := d.b.Delete(ctx, k); err != nil {
			d.log.Warn("export: clean-up could not delete a file", "destination", d.b.String(), "key", k, "task", d.task, "err", err)
		}
	}
}
