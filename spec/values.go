package spec

import (
	"fmt"
	"time"
)

// Object is a free-form YAML mapping that rigger hands on unchanged, such as
// a Kubernetes AdmissionConfiguration or audit Policy. Its keys are not
// checked against a schema here; the component that reads it does that.
type Object map[string]any

// Duration is a Go duration written as a string: `10s`, `1m30s`.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// MarshalText writes d in Go's duration syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads Go's duration syntax.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (write it like 10s, 2m or 1h30m)", string(b))
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", string(b))
	}
	*d = Duration(v)
	return nil
}
