package wal

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Object names under a store directory D (see FORMAT.md, "WAL").
const (
	walDir       = "_wal"             // D/_wal/<shard>/
	entriesDir   = "entries"          // dense entry objects, <pos:020d>.arrow
	manifestsDir = "_manifests"       // versions.Log of shard manifests
	latestHint   = "_latest_manifest" // versions.Log hint
	genDir       = "gen"              // immutable generation files
	arrowExt     = ".arrow"
)

// shardPattern is the store-name alphabet (the same as worker instance ids): a shard
// name is one safe path element.
var shardPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// ValidateShard reports whether name can name a shard directory. Like a store name
// it may not end in ".." nor hold "__0x": objstore refuses keys with "../" or
// fileblob's escape sequence, so such a shard could never write an entry.
func ValidateShard(name string) error {
	if !shardPattern.MatchString(name) || strings.HasSuffix(name, "..") || strings.Contains(name, "__0x") {
		return fmt.Errorf(`shard %q: want 1-128 characters from [A-Za-z0-9._-], not starting with '.' or '-', not ending in "..", without "__0x"`, name)
	}
	return nil
}

// shardRoot is D/_wal/<shard>.
func shardRoot(dir, shard string) string { return dir + "/" + walDir + "/" + shard }

func entriesPrefix(dir, shard string) string { return shardRoot(dir, shard) + "/" + entriesDir + "/" }

func entryKey(dir, shard string, pos uint64) string {
	return fmt.Sprintf("%s%020d%s", entriesPrefix(dir, shard), pos, arrowExt)
}

// parseEntryPos returns the position of an entry key, or false for anything else
// (a stray object in entries/ is ignored, never mistaken for an entry).
func parseEntryPos(key string) (uint64, bool) {
	name := path.Base(key)
	if !strings.HasSuffix(name, arrowExt) {
		return 0, false
	}
	digits := strings.TrimSuffix(name, arrowExt)
	if len(digits) != 20 {
		return 0, false
	}
	pos, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || pos == 0 {
		return 0, false
	}
	return pos, true
}

// generationPath is the path of a new generation file relative to the store
// directory. rand is fresh per seal attempt, so a retried seal never writes over a
// file an earlier attempt may have left half-written or already referenced.
func generationPath(shard, rand string, n uint64) string {
	return fmt.Sprintf("%s/%s/%s/%s_gen_%d%s", walDir, shard, genDir, rand, n, arrowExt)
}

// GenerationKey is the object key of generation g of a shard of the store in dir.
func GenerationKey(dir string, g Generation) string { return dir + "/" + g.Path }

func cleanDir(dir string) string { return strings.TrimSuffix(dir, "/") }
