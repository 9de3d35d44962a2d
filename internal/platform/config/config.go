// Package config holds what the Config structs of every component share:
// the *Error their Validate returns, naming the refused field and value, and
// the filling and checking of their settings.
package config

import (
	"fmt"
	"reflect"
	"time"
)

// Error is a setting out of its limits.
type Error struct {
	// Field is the Go path of the setting, such as "relay.Config.BatchSize".
	Field string
	// Value is the refused value; nil when there is nothing to show (a
	// required function or handle left unset).
	Value any
	// Err says why it was refused.
	Err error
}

func (e *Error) Error() string {
	if e.Value == nil { // as sarama says it: "Producer.Retry.Max must be >= 0"
		return fmt.Sprintf("%s %v", e.Field, e.Err)
	}
	if s, ok := e.Value.(string); ok {
		return fmt.Sprintf("%s %q: %v", e.Field, s, e.Err)
	}
	return fmt.Sprintf("%s %v: %v", e.Field, e.Value, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Invalid returns an *Error for field with value, the reason formatted as
// fmt.Errorf does (so it may wrap an error with %w).
func Invalid(field string, value any, format string, args ...any) *Error {
	return &Error{Field: field, Value: value, Err: fmt.Errorf(format, args...)}
}

// FillZero sets every exported field of *cfg that holds its zero value to
// the field's value in defaults: how a component turns "unset" into its
// default, with the defaults written once, in its DefaultConfig. A field
// whose zero is a setting of its own is a pointer (nil: unset).
func FillZero[T any](cfg *T, defaults T) {
	v, d := reflect.ValueOf(cfg).Elem(), reflect.ValueOf(defaults)
	for i := range v.NumField() {
		if f := v.Field(i); f.CanSet() && f.IsZero() {
			f.Set(d.Field(i))
		}
	}
}

// Duration is a duration setting and the range it must lie in, for
// CheckDurations.
type Duration struct {
	Name     string
	Value    time.Duration
	Min, Max time.Duration
}

// CheckDurations returns an *Error for the first d whose Value lies outside
// Min..Max, its field prefix+Name: "want MIN to MAX".
func CheckDurations(prefix string, ds []Duration) error {
	for _, d := range ds {
		if d.Value < d.Min || d.Value > d.Max {
			return Invalid(prefix+d.Name, d.Value, "want %s to %s", d.Min, d.Max)
		}
	}
	return nil
}
