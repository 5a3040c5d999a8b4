package registry

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrInvalidOption reports a store option the registry refuses (ParseMaxConsumerLag).
var ErrInvalidOption = errclass.New(errclass.Invalid, "invalid store option")

// Duration is a store option's length of time, kept in the registry object as a
// Go duration string ("10m0s") an operator reads as it is.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"10m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// ParseMaxConsumerLag reads the max_consumer_lag option as a client gives it: a
// Go duration ("10m", "90s"); "" and "0" turn it off. The error wraps
// ErrInvalidOption and names the value and what is wrong with it.
func ParseMaxConsumerLag(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: max_consumer_lag %q is not a duration like \"10m\" or \"90s\" (\"0\" turns it off)", ErrInvalidOption, s)
	case d < 0:
		return 0, fmt.Errorf("%w: max_consumer_lag %q is negative (\"0\" turns it off)", ErrInvalidOption, s)
	}
	return d, nil
}
