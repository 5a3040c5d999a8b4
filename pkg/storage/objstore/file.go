package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// tempDirName is the hidden directory under a file:// bucket's root where writes are
// staged. It sits under the root (not os.TempDir) so that rename and link never cross
// a filesystem boundary, and ValidateKey reserves it so no object can collide with it.
const tempDirName = ".tidemark-tmp"

// staleTempAge is how old a staged file must be before Open deletes it. A staged file
// lives only for the duration of one put, so anything this old was left by a process
// that crashed mid-write.
const staleTempAge = 24 * time.Hour

// fileBackend stores objects as files under root, with no gocloud driver under it:
// fileblob's create is not atomic and its reads open an .attrs sidecar beside every
// file (openObject).
//
//   - put writes a temp file, fsyncs it, renames it over the final name and fsyncs the
//     directory, so readers see the old or the new bytes and a crash loses neither.
//   - putIfAbsent publishes the synced temp file with link(2), which fails with EEXIST
//     if the name is taken. That makes it atomic across goroutines and processes,
//     unlike fileblob's IfNotExist (stat, then rename: two writers can both "win").
//   - list walks the directory itself so results come back in key order (fileblob
//     returns them in directory-walk order, where "a/b" precedes "a-c") and so the
//     staging directory never shows.
//   - reads open the file; a file is never written in place, so a read sees one
//     whole version of the object, even if it is replaced or deleted meanwhile.
//
// An object key maps to root/prefix/key with "/" as the path separator. ValidateKey
// rejects the keys fileblob would escape to another path, so a bucket written by an
// earlier version, which read through fileblob, holds its objects where this one
// looks for them.
type fileBackend struct {
	root   string // absolute directory of the bucket
	prefix string // key prefix from ?prefix=, "" or ending in "/"
	tmpDir string // root/.tidemark-tmp
}

// openFile opens a file:// URL: file:///abs/dir, file://localhost/abs/dir,
// file://./rel/dir or file:rel/dir, each with an optional ?prefix=p/. The directory is
// created if missing.
func openFile(u *url.URL) (backend, error) {
	dir, err := fileDir(u)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	for k := range q {
		if k != "prefix" {
			return nil, fmt.Errorf("unknown query parameter %q (file:// accepts only prefix)", k)
		}
	}
	prefix := q.Get("prefix")
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			return nil, fmt.Errorf("prefix %q must end in \"/\" (it names a directory)", prefix)
		}
		if err := ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return nil, fmt.Errorf("prefix: %w", err)
		}
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(root, 0o777); err != nil {
		return nil, err
	}
	// Listing walks from root without following symlinks, so root itself must not
	// be one (e.g. DATA_URL naming a symlinked data directory).
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, err
	}
	f := &fileBackend{
		root:   root,
		prefix: prefix,
		tmpDir: filepath.Join(root, tempDirName),
	}
	f.removeStaleTemps()
	return f, nil
}

// fileDir extracts the directory from a file:// URL. A host other than "", "localhost"
// or "." is refused rather than guessed at: file://data/x is more likely a mistyped
// file:///data/x than a relative path.
func fileDir(u *url.URL) (string, error) {
	if u.Opaque != "" { // file:rel/dir
		return url.PathUnescape(u.Opaque)
	}
	switch u.Host {
	case "", "localhost":
		if u.Path == "" {
			return "", errors.New("empty path (want file:///abs/dir or file://./rel/dir)")
		}
		return u.Path, nil
	case ".":
		return "." + u.Path, nil
	}
	return "", fmt.Errorf("host %q in a file URL (want file:///abs/dir or file://./rel/dir)", u.Host)
}

// path is where key lives on disk.
func (f *fileBackend) path(key string) string {
	return filepath.Join(f.root, filepath.FromSlash(f.prefix+key))
}

// openObject opens key's file for reading. A missing file, a path through a file,
// and a directory (a common prefix, never an object) are ErrNotFound. Reads open
// the file themselves rather than through fileblob, which opens and reads an
// .attrs sidecar beside each: a ranged read of 8 KiB through Bucket.GetRange took
// 17 µs that way and 10 µs this way, and a merge into a large store makes
// hundreds of them.
func (f *fileBackend) openObject(ctx context.Context, key string) (*os.File, fs.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	file, err := os.Open(f.path(key))
	if notAnObject(err, nil) {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, nil, err
	}
	info, err := file.Stat()
	if notAnObject(err, info) {
		err = fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		file.Close()
		return nil, nil, err
	}
	return file, info, nil
}

// notAnObject reports whether opening or stating a key's path found no object
// there: no file, a path through a file, or a directory (info, when err is nil).
func notAnObject(err error, info fs.FileInfo) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || (err == nil && info != nil && !info.Mode().IsRegular())
}

func (f *fileBackend) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	file, info, err := f.openObject(ctx, key)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if limit >= 0 && info.Size() > limit {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, info.Size(), limit)
	}
	// The open file is never written (put renames a new one over its name), so its
	// size is its length and the limit was checked above.
	return readRange(file, info.Size())
}

func (f *fileBackend) getRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("negative offset %d", offset)
	}
	file, info, err := f.openObject(ctx, key)
	if err != nil {
		return nil, err
	}
	length = bytesWithin(info.Size(), offset, length)
	return &fileRange{SectionReader: io.NewSectionReader(file, offset, length), file: file}, nil
}

// bytesWithin is how many of the length bytes at offset (length < 0: to the end)
// an object of size bytes holds: none past its end.
func bytesWithin(size, offset, length int64) int64 {
	if length < 0 || offset+length > size {
		length = size - offset
	}
	return max(length, 0)
}

// fileRange is a ranged read of an open file; closing it closes the file.
type fileRange struct {
	*io.SectionReader
	file *os.File
}

func (r *fileRange) Close() error { return r.file.Close() }

func (f *fileBackend) stat(ctx context.Context, key string) (Object, error) {
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	info, err := os.Stat(f.path(key))
	if notAnObject(err, info) {
		return Object{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return Object{}, err
	}
	return Object{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil
}

func (f *fileBackend) put(ctx context.Context, key string, data []byte) error {
	tmp, err := f.stage(ctx, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return f.publish(ctx, tmp, key)
}

// publish renames the synced staged file tmp over key's name: readers see the
// old or the new bytes, and a crash loses neither.
func (f *fileBackend) publish(ctx context.Context, tmp, key string) error {
	final := f.path(key)
	if err := f.mkdirs(filepath.Dir(final)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(filepath.Dir(final))
}

func (f *fileBackend) putIfAbsent(ctx context.Context, key string, data []byte) error {
	tmp, err := f.stage(ctx, data)
	if err != nil {
		return err
	}
	// After a successful link the object is reachable under both names; removing the
	// staged name leaves exactly one.
	defer os.Remove(tmp)
	final := f.path(key)
	if err := f.mkdirs(filepath.Dir(final)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Link(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %v", ErrExists, err)
		}
		return err
	}
	return syncDir(filepath.Dir(final))
}

// stage writes data to a new, uniquely named file in the staging directory and syncs
// it, so that publishing it is a single rename or link of a complete file.
func (f *fileBackend) stage(ctx context.Context, data []byte) (name string, err error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	file, err := f.createTemp()
	if err != nil {
		return "", err
	}
	name = file.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(name)
		}
	}()
	if _, err := file.Write(data); err != nil {
		_ = file.Close()
		return "", err
	}
	if err := file.Sync(); err != nil {
		_ = file.Close()
		return "", err
	}
	if err := file.Close(); err != nil {
		return "", err
	}
	return name, nil
}

// createTemp creates a new, uniquely named file in the staging directory.
func (f *fileBackend) createTemp() (*os.File, error) {
	for attempt := 0; ; attempt++ {
		var rnd [12]byte
		_, _ = rand.Read(rnd[:])
		name := filepath.Join(f.tmpDir, fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(rnd[:])))
		file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			return file, nil
		}
		if errors.Is(err, fs.ErrNotExist) && attempt == 0 {
			// First write into this bucket, or someone removed the staging directory.
			if err := os.MkdirAll(f.tmpDir, 0o777); err != nil {
				return nil, err
			}
			continue
		}
		if errors.Is(err, fs.ErrExist) && attempt < 3 {
			continue
		}
		return nil, err
	}
}

// mkdirs creates dir and any missing parents below root, syncing each parent after
// creating a child in it, so a published object's directory survives a crash too.
// Concurrent creators of the same directory are fine: EEXIST counts as success.
func (f *fileBackend) mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if dir == f.root || parent == dir {
		return os.MkdirAll(dir, 0o777)
	}
	if err := f.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o777); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return syncDir(parent)
}

// syncDir fsyncs a directory so that a rename, link or mkdir in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	// Some filesystems cannot sync a directory; the data itself was synced.
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		return nil
	}
	return err
}

// delete removes the file for key. A directory at that path is a "prefix", not an
// object, so it counts as missing (fileblob would fail with "directory not empty").
func (f *fileBackend) delete(_ context.Context, key string) error {
	p := f.path(key)
	fi, err := os.Lstat(p)
	if err == nil && fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory", ErrNotFound, p)
	}
	if err == nil {
		err = os.Remove(p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}

// list walks the smallest directory that can hold keys with the prefix, collects the
// matching files, sorts them by key and then collapses delimited "directories". It
// holds the whole listing in memory, which is fine for the local and test stores this
// driver serves.
func (f *fileBackend) list(ctx context.Context, prefix, delimiter string, fn func(Object) error) error {
	full := f.prefix + prefix
	start := f.root
	if i := strings.LastIndex(full, "/"); i >= 0 {
		start = filepath.Join(f.root, filepath.FromSlash(full[:i]))
	}
	var objs []Object
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// A missing start means an empty listing; anything that vanished
			// mid-walk was deleted concurrently and is simply not listed.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == f.root {
			return nil
		}
		rel, err := filepath.Rel(f.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p == f.tmpDir {
				return filepath.SkipDir
			}
			dirKey := rel + "/"
			if p != start && !strings.HasPrefix(dirKey, full) && !strings.HasPrefix(full, dirKey) {
				return filepath.SkipDir
			}
			// Listed with "/" as the delimiter, the first directory met under the
			// prefix is one common prefix whatever it holds: it is listed when it
			// holds an object, without walking (and stating) the rest of it. A
			// store's WAL directory lists its shards on every snapshot refresh;
			// walked whole, that cost every entry and generation of every shard.
			if delimiter == "/" && p != start && strings.HasPrefix(dirKey, full) {
				found, err := holdsObject(p)
				if err != nil {
					return err
				}
				if found {
					objs = append(objs, Object{Key: dirKey[len(f.prefix):], IsDir: true})
				}
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(rel, full) || strings.HasSuffix(rel, ".attrs") || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		objs = append(objs, Object{Key: rel[len(f.prefix):], Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	lastDir := ""
	for _, o := range objs {
		if delimiter != "" {
			if i := strings.Index(o.Key[len(prefix):], delimiter); i >= 0 {
				dir := o.Key[:len(prefix)+i+len(delimiter)]
				if dir == lastDir {
					continue
				}
				lastDir = dir
				o = Object{Key: dir, IsDir: true}
			}
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// errFound stops holdsObject's walk at the first object.
var errFound = errors.New("found")

// holdsObject reports whether the directory at p holds an object at any depth (a
// regular file that is not a fileblob sidecar): deletes leave directories behind,
// and an empty one is no common prefix.
func holdsObject(p string) (bool, error) {
	err := filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() && !strings.HasSuffix(d.Name(), ".attrs") {
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}

// getRanges opens the object once for all of its ranges.
func (f *fileBackend) getRanges(ctx context.Context, key string, rs []ByteRange) ([][]byte, error) {
	file, info, err := f.openObject(ctx, key)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	out := make([][]byte, len(rs))
	for i, r := range rs {
		n := bytesWithin(info.Size(), r.Off, r.N)
		if n == 0 {
			continue
		}
		buf := make([]byte, n)
		// The open file is never written (put renames a new one over its name),
		// so the range is there to its last byte.
		if _, err := file.ReadAt(buf, r.Off); err != nil {
			return nil, err
		}
		out[i] = buf
	}
	return out, nil
}

func (f *fileBackend) local() bool { return true }

func (f *fileBackend) close() error { return nil }

// removeStaleTemps deletes staged files left behind by crashed writers. Best effort:
// a bucket that cannot be cleaned still works.
func (f *fileBackend) removeStaleTemps() {
	entries, err := os.ReadDir(f.tmpDir)
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-staleTempAge)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && info.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(f.tmpDir, e.Name()))
		}
	}
}
