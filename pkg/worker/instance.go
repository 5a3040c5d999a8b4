package worker

import (
	"fmt"
	"regexp"
)

// instanceIDPattern is the store-name alphabet: an instance id becomes the shard
// directory _wal/<instance>/ in every store, so it must be one safe path element.
var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// ValidateInstanceID reports whether id can name a worker and its shard: 1-128
// characters from [A-Za-z0-9._-], not starting with '.' or '-'.
func ValidateInstanceID(id string) error {
	if !instanceIDPattern.MatchString(id) {
		return fmt.Errorf("instance id %q: want 1-128 characters from [A-Za-z0-9._-], not starting with '.' or '-'", id)
	}
	return nil
}
