package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MinTokenLength is the shortest token accepted: shorter ones are guessable.
const MinTokenLength = 16

// ErrNoToken means a token source held no token; ErrShortToken that a token is
// shorter than MinTokenLength.
var (
	ErrNoToken    = errors.New("no token")
	ErrShortToken = fmt.Errorf("token shorter than %d characters", MinTokenLength)
)

// Tokens are the tokens a server accepts. The first is the one a client sends:
// during a rotation a file lists the new token and the old one, servers accept
// both, and clients move to the first.
type Tokens struct {
	digests [][sha256.Size]byte
	first   string
}

// NewTokens returns tokens (blank ones are skipped, whitespace is trimmed).
// source names where they came from (a flag, a file) in errors.
func NewTokens(source string, tokens ...string) (*Tokens, error) {
	t := &Tokens{}
	for i, tok := range tokens {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		if len(tok) < MinTokenLength {
			return nil, fmt.Errorf("%s: token %d: %w (generate one with `openssl rand -hex 32`)", source, i+1, ErrShortToken)
		}
		if t.first == "" {
			t.first = tok
		}
		t.digests = append(t.digests, sha256.Sum256([]byte(tok)))
	}
	if len(t.digests) == 0 {
		return nil, fmt.Errorf("%s: %w", source, ErrNoToken)
	}
	return t, nil
}

// LoadTokenFile reads one token per line from path (blank lines skipped).
// source names the setting (e.g. "--auth-token-file (AUTH_TOKEN_FILE)").
func LoadTokenFile(source, path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return NewTokens(source+" "+path, strings.Split(string(data), "\n")...)
}

// Valid reports whether presented is one of the tokens. It compares the
// presented token's digest with every token's digest in constant time and never
// stops early, so the time taken does not depend on which token matched, how
// long the presented one is, or where it differs.
func (t *Tokens) Valid(presented string) bool {
	if t == nil {
		return false
	}
	d := sha256.Sum256([]byte(presented))
	match := 0
	for i := range t.digests {
		match |= subtle.ConstantTimeCompare(d[:], t.digests[i][:])
	}
	return match == 1
}

// Outgoing is the token a client sends: the first one.
func (t *Tokens) Outgoing() string {
	if t == nil {
		return ""
	}
	return t.first
}

// Len is how many tokens are accepted.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.digests)
}

// GenerateToken returns a new random token: 32 bytes from crypto/rand, hex.
func GenerateToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// EnsureTokenFile creates path with a new token, readable by its owner only,
// unless it exists; created says whether it did. An existing file is used as
// it is (LoadTokenFile checks it).
func EnsureTokenFile(path string) (created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("token file %s: %w", path, err)
	}
	tok, err := GenerateToken()
	if err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil // created meanwhile by someone else: use theirs
	}
	if err != nil {
		return false, fmt.Errorf("token file %s: %w", path, err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		_ = f.Close()
		return false, fmt.Errorf("token file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("token file %s: %w", path, err)
	}
	return true, nil
}
