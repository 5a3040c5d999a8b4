package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	tokA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	tokB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// A rotation lists the new and the old token: both are accepted, the first is
// the one sent, and nothing else is accepted - not a prefix, not an extension,
// not the empty string (the digest comparison hides the length, it must not
// blur it).
func TestTokenFileAcceptsEveryListedTokenAndSendsTheFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("\n  "+tokB+"  \n\n"+tokA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := LoadTokenFile("--auth-token-file", path)
	if err != nil {
		t.Fatal(err)
	}
	if toks.Len() != 2 || toks.Outgoing() != tokB {
		t.Fatalf("loaded %d tokens, outgoing %q; want 2 and the first line's", toks.Len(), toks.Outgoing())
	}
	for _, ok := range []string{tokA, tokB} {
		if !toks.Valid(ok) {
			t.Errorf("Valid(%q) = false, want true", ok)
		}
	}
	for _, bad := range []string{"", tokA[:31], tokA + "a", " " + tokA, strings.ToUpper(tokA), "cccccccccccccccccccccccccccccccc"} {
		if toks.Valid(bad) {
			t.Errorf("Valid(%q) = true, want false", bad)
		}
	}
	var none *Tokens
	if none.Valid(tokA) || none.Len() != 0 || none.Outgoing() != "" {
		t.Error("nil Tokens must accept nothing and send nothing")
	}
}

func TestShortOrMissingTokenIsRefusedNamingTheSetting(t *testing.T) {
	if _, err := NewTokens("--auth-token (AUTH_TOKEN)", "short"); !errors.Is(err, ErrShortToken) || !strings.Contains(err.Error(), "AUTH_TOKEN") {
		t.Errorf("short token: err = %v, want ErrShortToken naming AUTH_TOKEN", err)
	}
	path := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(path, []byte("\n   \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokenFile("--auth-token-file (AUTH_TOKEN_FILE)", path); !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), "AUTH_TOKEN_FILE") {
		t.Errorf("empty file: err = %v, want ErrNoToken naming AUTH_TOKEN_FILE", err)
	}
	if _, err := LoadTokenFile("--auth-token-file (AUTH_TOKEN_FILE)", filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "AUTH_TOKEN_FILE") {
		t.Errorf("missing file: err = %v, want one naming AUTH_TOKEN_FILE", err)
	}
}

func TestEnsureTokenFileCreatesAPrivateTokenOnceAndKeepsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth-token")
	created, err := EnsureTokenFile(path)
	if err != nil || !created {
		t.Fatalf("first EnsureTokenFile = %v, %v; want created", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v (%v), want 0600", fi.Mode(), err)
	}
	first, err := LoadTokenFile("test", path)
	if err != nil {
		t.Fatal(err)
	}
	if created, err := EnsureTokenFile(path); err != nil || created {
		t.Fatalf("second EnsureTokenFile = %v, %v; want the file kept", created, err)
	}
	again, err := LoadTokenFile("test", path)
	if err != nil || again.Outgoing() != first.Outgoing() {
		t.Fatalf("token changed across EnsureTokenFile calls")
	}
}
