package retry

import "fmt"

// Class is the retry class of an error.
type Class uint8

// The classes. The zero value is ClassUnknown.
const (
	// ClassUnknown: no classifier recognized the error. Unknown errors
	// are retried like transient ones; callers count them separately.
	ClassUnknown Class = iota
	// ClassTransient: the failure is expected to go away; retry.
	ClassTransient
	// ClassPermanent: retrying cannot help; stop.
	ClassPermanent
)

var classNames = [...]string{
	ClassUnknown:   "unknown",
	ClassTransient: "transient",
	ClassPermanent: "permanent",
}

// String returns "unknown", "transient" or "permanent" (or "Class(N)" for
// values out of range).
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// ParseClass is the inverse of [Class.String].
func ParseClass(s string) (Class, error) {
	for i, name := range classNames {
		if s == name {
			return Class(i), nil
		}
	}
	return ClassUnknown, fmt.Errorf("retry: unknown class %q (want unknown, transient or permanent)", s)
}

// MarshalText implements encoding.TextMarshaler; out-of-range values are
// an error.
func (c Class) MarshalText() ([]byte, error) {
	if int(c) >= len(classNames) {
		return nil, fmt.Errorf("retry: invalid class %d", uint8(c))
	}
	return []byte(classNames[c]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using [ParseClass].
func (c *Class) UnmarshalText(text []byte) error {
	v, err := ParseClass(string(text))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// StopReason says why retrying stopped. The empty value, StopNone, means
// it did not.
type StopReason string

// The stop reasons.
const (
	StopNone         StopReason = ""
	StopNonRetryable StopReason = "non_retryable" // the error was permanent
	StopMaxAttempts  StopReason = "max_attempts"  // the attempt limit was reached
	StopRetryWindow  StopReason = "retry_window"  // the next attempt would start after the retry window
	StopCanceled     StopReason = "canceled"      // the context was canceled (only from Do)
)
