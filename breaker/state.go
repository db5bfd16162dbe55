package breaker

import (
	"fmt"
	"time"
)

// State is a breaker's state.
type State uint8

// The states.
const (
	Closed   State = iota // calls flow; failures are counted
	Open                  // calls are refused until the cool-down ends
	HalfOpen              // a limited number of probe calls decide
)

var stateNames = [...]string{Closed: "closed", Open: "open", HalfOpen: "half_open"}

// String returns "closed", "open" or "half_open".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("breaker: invalid state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// Transition describes one state change, as passed to Config.OnStateChange.
type Transition struct {
	Name     string    // the breaker's name
	From, To State     // the states before and after
	At       time.Time // the time passed to the call that caused it
	Reason   string    // why: "consecutive_failures", "failure_rate", "cool_down", "probe_failed", "probes_succeeded"
}
