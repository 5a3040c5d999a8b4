package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
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
		key, err := unquote(b[i : i+l])
		if err != nil {
			return atKey(err, b[i:i+l])
		}
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

// unquote decodes the JSON string literal b. A literal that holds no valid UTF-8
// text - raw bytes that are not UTF-8, or an escaped UTF-16 surrogate without its
// pair - is a value error saying where. encoding/json would read both as U+FFFD:
// ids that differ only there would become one row, and a stored value would not be
// what the client sent.
func unquote(b []byte) (string, error) {
	inner := b[1 : len(b)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		if !utf8.Valid(inner) {
			return "", badUTF8(inner, 0)
		}
		return string(inner), nil
	}
	return unescape(inner)
}

// unescape decodes the inside of a JSON string literal that has escapes. Runs
// between escapes are checked and copied whole, so text with a newline every few
// dozen bytes costs little more than text without.
func unescape(s []byte) (string, error) {
	var out strings.Builder // its String does not copy
	out.Grow(len(s))
	for i := 0; i < len(s); {
		run := s[i:]
		if j := bytes.IndexByte(run, '\\'); j >= 0 {
			run = run[:j]
		}
		if !utf8.Valid(run) {
			return "", badUTF8(run, i)
		}
		out.Write(run)
		i += len(run)
		if i == len(s) {
			break
		}
		// s[i] is a backslash; the literal is valid JSON, so its escape is complete.
		switch c := s[i+1]; c {
		case 'u':
			r, n, err := escapedRune(s, i)
			if err != nil {
				return "", err
			}
			out.WriteRune(r)
			i += n
			continue
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		default: // '"', '\\', '/'
			out.WriteByte(c)
		}
		i += 2
	}
	return out.String(), nil
}

// escapedRune reads the \uXXXX escape at s[i:], and the low half that must
// follow a high surrogate. It returns the rune and the bytes read (6 or 12).
func escapedRune(s []byte, i int) (rune, int, error) {
	r := hex4(s[i+2 : i+6])
	if !utf16.IsSurrogate(r) {
		return r, 6, nil
	}
	if r < 0xdc00 && i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
		// DecodeRune answers U+FFFD for anything but a high-low pair.
		if pair := utf16.DecodeRune(r, hex4(s[i+8:i+12])); pair != utf8.RuneError {
			return pair, 12, nil
		}
	}
	return 0, 0, invalidValue("invalid UTF-8 in string: %s at offset %d is half of a UTF-16 surrogate pair", s[i:i+6], i)
}

// hex4 is the value of 4 hex digits (valid JSON guarantees them).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// badUTF8 is the error for run, a stretch of a string starting at offset off that
// is not valid UTF-8: it names the first bad byte.
func badUTF8(run []byte, off int) error {
	i := 0
	for i < len(run) {
		r, size := utf8.DecodeRune(run[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	var bad byte
	if i < len(run) {
		bad = run[i]
	}
	return invalidValue("invalid UTF-8 in string: byte 0x%02x at offset %d", bad, off+i)
}

// checkText checks every string of the valid JSON text b (keys too) as unquote
// does, for columns that store JSON text as sent. Outside its strings valid JSON
// is ASCII without backslashes, so the whole text can be scanned at once.
func checkText(b []byte) error {
	if !utf8.Valid(b) {
		return badUTF8(b, 0)
	}
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return nil
		}
		i += j
		if b[i+1] != 'u' {
			i += 2
			continue
		}
		_, n, err := escapedRune(b, i)
		if err != nil {
			return err
		}
		i += n
	}
}

// atKey makes err, about the object key literal key, say it is about the key.
func atKey(err error, key []byte) error {
	var ve *valueError
	if errors.As(err, &ve) {
		ve.reason = "key " + quoteExcerpt(key) + ": " + ve.reason
	}
	return err
}

func isNull(b []byte) bool { return len(b) == 4 && string(b) == "null" }

// excerptLen bounds the bytes of a value an error message quotes.
const excerptLen = 40

// quoteExcerpt quotes the string literal b for an error message, cut to
// excerptLen bytes. A string unquote refuses is quoted as written, so the message
// shows the bytes (\xff) or the escape (\\ud800) that were refused.
func quoteExcerpt(b []byte) string {
	s, err := unquote(b)
	if err != nil {
		s = string(b[1 : len(b)-1])
	}
	if len(s) > excerptLen {
		cut := excerptLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strconv.Quote(s)
}

// describe names a JSON value for an error message: its kind and, for scalars, a
// short excerpt.
func describe(b []byte) string {
	switch b[0] {
	case '"':
		return "string " + quoteExcerpt(b)
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "boolean " + string(b)
	case 'n':
		return "null"
	default:
		if len(b) > excerptLen {
			return "number " + string(b[:excerptLen]) + "…"
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
