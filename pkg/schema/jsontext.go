package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// This file holds the few JSON-text primitives the codecs share. Every function
// that walks text expects it to be valid JSON (checked once with json.Valid by the
// entry point); that lets the walkers split arrays and objects without allocating
// a json.RawMessage per element, which matters for token lists thousands long.

// isSpace reports JSON insignificant whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// trimSpace drops surrounding whitespace from a valid JSON value.
func trimSpace(b []byte) []byte {
	return bytes.TrimFunc(b, func(r rune) bool { return r < utf8.RuneSelf && isSpace(byte(r)) })
}

// valueLen returns the length of the JSON value that starts at b[0].
func valueLen(b []byte) int {
	switch b[0] {
	case '"':
		return stringLen(b)
	case '[', '{':
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				i += stringLen(b[i:]) - 1
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		i := 0
		for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != ']' && b[i] != '}' {
			i++
		}
		return i
	}
}

// stringLen returns the length of the JSON string literal at b[0] == '"'.
func stringLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// eachElement calls fn with every element of the JSON array b (b[0] == '[').
func eachElement(b []byte, fn func(i int, elem []byte) error) error {
	i := skipSpace(b, 1)
	for n := 0; i < len(b) && b[i] != ']'; n++ {
		l := valueLen(b[i:])
		if err := fn(n, b[i:i+l]); err != nil {
			return err
		}
		i = skipSpace(b, i+l)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return nil
}

// eachMember calls fn with every member of the JSON object b (b[0] == '{'), in
// document order, duplicates included.
func eachMember(b []byte, fn func(key string, val []byte) error) error {
	i := skipSpace(b, 1)
	for i < len(b) && b[i] != '}' {
		l := stringLen(b[i:])
		key := unquote(b[i : i+l])
		i = skipSpace(b, i+l)
		i = skipSpace(b, i+1) // ':'
		vl := valueLen(b[i:])
		if err := fn(key, b[i:i+vl]); err != nil {
			return err
		}
		i = skipSpace(b, i+vl)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return nil
}

// unquote decodes the JSON string literal b. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does, so every decoded string is valid UTF-8.
func unquote(b []byte) string {
	inner := b[1 : len(b)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	_ = json.Unmarshal(b, &s) // b is a valid literal
	return s
}

func isNull(b []byte) bool { return len(b) == 4 && string(b) == "null" }

// describe names a JSON value for an error message: its kind and, for scalars, a
// short excerpt.
func describe(b []byte) string {
	const max = 40
	switch b[0] {
	case '"':
		s := unquote(b)
		if len(s) > max {
			cut := max
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			s = s[:cut] + "…"
		}
		return "string " + strconv.Quote(s)
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "boolean " + string(b)
	case 'n':
		return "null"
	default:
		if len(b) > max {
			return "number " + string(b[:max]) + "…"
		}
		return "number " + string(b)
	}
}

// appendString appends s as a JSON string literal, escaping as encoding/json does
// (minus its HTML escaping). Invalid UTF-8 is written as U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript string literals.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compact returns the valid JSON value b without insignificant whitespace.
func compact(b []byte) []byte {
	var buf bytes.Buffer
	_ = json.Compact(&buf, b) // b is valid
	return buf.Bytes()
}
