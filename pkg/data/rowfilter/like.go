package rowfilter

import (
	"strings"
	"unicode/utf8"
)

// likeTok is one element of a LIKE pattern: literal text, _ or %.
type likeTok struct {
	kind likeKind
	s    string // likeLit only
}

type likeKind uint8

const (
	likeLit  likeKind = iota
	likeOne           // _: exactly one character
	likeMany          // %: any run of characters, empty included
)

// likeMatcher matches strings against a compiled LIKE pattern. The common
// shapes ('abc', 'abc%', '%abc', '%abc%') take the strings package's fast
// paths; anything else runs the backtracking matcher.
type likeMatcher struct {
	toks  []likeTok
	shape likeShape
	lit   string // the literal of a simple shape
}

type likeShape uint8

const (
	shapeGeneral likeShape = iota
	shapeEqual
	shapePrefix
	shapeSuffix
	shapeContains
	shapeAny // '%': every non-null string
)

// compileLike compiles pattern with escape as its escape character (-1: none).
// An escape makes the next character literal; one at the very end is an error.
func compileLike(pattern string, escape rune) (*likeMatcher, error) {
	var toks []likeTok
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			toks = append(toks, likeTok{kind: likeLit, s: lit.String()})
			lit.Reset()
		}
	}
	escaped := false
	for _, r := range pattern {
		switch {
		case escaped:
			lit.WriteRune(r)
			escaped = false
		case r == escape:
			escaped = true
		case r == '%':
			flush()
			if len(toks) == 0 || toks[len(toks)-1].kind != likeMany {
				toks = append(toks, likeTok{kind: likeMany})
			}
		case r == '_':
			flush()
			toks = append(toks, likeTok{kind: likeOne})
		default:
			lit.WriteRune(r)
		}
	}
	if escaped {
		return nil, errorf(ErrSyntax, "", "LIKE pattern %q ends with its escape character %q", pattern, escape)
	}
	flush()
	m := &likeMatcher{toks: toks}
	kinds := make([]likeKind, len(toks))
	for i, t := range toks {
		kinds[i] = t.kind
	}
	switch k := kinds; {
	case len(k) == 0:
		m.shape = shapeEqual // '' matches only ''
	case len(k) == 1 && k[0] == likeLit:
		m.shape, m.lit = shapeEqual, toks[0].s
	case len(k) == 1 && k[0] == likeMany:
		m.shape = shapeAny
	case len(k) == 2 && k[0] == likeLit && k[1] == likeMany:
		m.shape, m.lit = shapePrefix, toks[0].s
	case len(k) == 2 && k[0] == likeMany && k[1] == likeLit:
		m.shape, m.lit = shapeSuffix, toks[1].s
	case len(k) == 3 && k[0] == likeMany && k[1] == likeLit && k[2] == likeMany:
		m.shape, m.lit = shapeContains, toks[1].s
	}
	return m, nil
}

func (m *likeMatcher) match(s string) bool {
	switch m.shape {
	case shapeEqual:
		return s == m.lit
	case shapePrefix:
		return strings.HasPrefix(s, m.lit)
	case shapeSuffix:
		return strings.HasSuffix(s, m.lit)
	case shapeContains:
		return strings.Contains(s, m.lit)
	case shapeAny:
		return true
	}
	return matchToks(m.toks, s)
}

// matchToks is the classic wildcard matcher: advance greedily, and on a
// mismatch let the last % seen absorb one more character and retry from
// there. Earlier %s never need revisiting, so it is O(len(s) * len(toks)) at
// worst and linear for most patterns. Characters are UTF-8 runes (a byte of
// invalid UTF-8 counts as one).
func matchToks(toks []likeTok, s string) bool {
	ti, si := 0, 0
	starT, starS := -1, 0
	for si < len(s) {
		if ti < len(toks) {
			switch t := toks[ti]; t.kind {
			case likeMany:
				starT, starS = ti, si
				ti++
				continue
			case likeOne:
				_, n := utf8.DecodeRuneInString(s[si:])
				si += n
				ti++
				continue
			case likeLit:
				if strings.HasPrefix(s[si:], t.s) {
					si += len(t.s)
					ti++
					continue
				}
			}
		}
		if starT < 0 {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		si, ti = starS, starT+1
	}
	for ti < len(toks) && toks[ti].kind == likeMany {
		ti++
	}
	return ti == len(toks)
}
