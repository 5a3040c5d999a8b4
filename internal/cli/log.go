package cli

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger returns a JSON slog logger writing to w at level ("debug", "info", "warn",
// "error", or an offset such as "info+2").
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}
