package objstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// TestValidateKey pins which keys every driver stores under exactly their own name.
// The file:// driver writes to the raw path and reads through fileblob, which escapes
// some keys to other file names; an accepted key that fileblob escapes would be
// written to one file and read from another.
func TestValidateKey(t *testing.T) {
	ok := []string{
		"a",
		"_registry/rollout/store-1.json",
		"rollout/s/_versions/00000000000000000012.json",
		"rollout/s/_wal/host-1/gen/0a1b_gen_7.arrow",
		"a/b.c/d..e", // ".." inside an element, not before a "/"
		"x..",        // ".." at the very end is not escaped
		"__0",        // only "__0x" starts an escape sequence
		".hidden/x",  // leading dots are fine except the staging directory
		"a/.tidemark-tmp/x",
		"ünïcödé/日本",
		`quote"hash#percent%question?`, // azureblob escapes these reversibly
		strings.Repeat("a", 255),
		strings.Repeat("a/", 511) + "b", // 1023 bytes
	}
	for _, k := range ok {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	bad := map[string]string{
		"":                              "empty",
		"/a":                            "leading slash",
		"a/":                            "trailing slash",
		"a//b":                          "empty element",
		"./a":                           `"." element`,
		"a/../b":                        `".." element`,
		"a../b":                         `fileblob escapes the "/" after ".."`,
		"a/b__0x2f__c":                  "looks like a fileblob escape",
		"a\x00b":                        "NUL",
		"a\nb":                          "newline",
		"a\x7fb":                        "DEL",
		"a\\b":                          "backslash",
		"a\xffb":                        "invalid UTF-8",
		"x.attrs":                       "fileblob sidecar suffix",
		".tidemark-tmp/x":               "staging directory",
		".tidemark-tmp":                 "staging directory",
		strings.Repeat("a", 256):        "element over 255 bytes",
		strings.Repeat("a/", 512) + "b": "over 1024 bytes",
	}
	for k, why := range bad {
		err := objstore.ValidateKey(k)
		if !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey (%s)", k, err, why)
		}
	}
}
