package devcluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
)

// LineFilter decides which of a child's output lines reach the console, and
// renders them for a human.
type LineFilter struct {
	// Level is the lowest slog level echoed.
	Level slog.Level
}

// Render returns the console text of one output line and whether to echo it. A
// JSON log line (the binaries log with slog's JSON handler) is echoed at or above
// Level, as "LEVEL message key=value ...", without its time. Any other line (a
// panic, a usage error) is always echoed as it is: it is what explains a crash.
func (f LineFilter) Render(line []byte) (string, bool) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return "", false
	}
	fields, ok := decodeObject(line)
	if !ok {
		return string(line), true
	}
	var level slog.Level
	levelText, msg := "", ""
	var rest []string
	for _, kv := range fields {
		switch kv.key {
		case slog.TimeKey:
		case slog.LevelKey:
			levelText = unquote(kv.value)
		case slog.MessageKey:
			msg = unquote(kv.value)
		default:
			rest = append(rest, kv.key+"="+compact(kv.value))
		}
	}
	if levelText == "" || level.UnmarshalText([]byte(levelText)) != nil {
		return string(line), true // JSON, but not a log line we know
	}
	if level < f.Level {
		return "", false
	}
	var b strings.Builder
	b.WriteString(levelText)
	b.WriteByte(' ')
	b.WriteString(msg)
	for _, r := range rest {
		b.WriteByte(' ')
		b.WriteString(r)
	}
	return b.String(), true
}

type field struct {
	key   string
	value json.RawMessage
}

// decodeObject returns the members of a JSON object in their order.
func decodeObject(data []byte) ([]field, bool) {
	if len(data) == 0 || data[0] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, ok := tok.(string)
		if !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, field{key, v})
	}
	return out, true
}

// unquote returns a JSON string's text, or the raw value of anything else.
func unquote(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// compact renders a value: strings without quotes unless they hold spaces.
func compact(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "" || strings.ContainsAny(s, " \t\"=") {
			return string(v)
		}
		return s
	}
	return string(v)
}
