package breaker

import (
	"slices"
	"sync"
)

// Set holds one [Breaker] per downstream name, created on first use with a
// shared Config. It is safe for concurrent use. Breakers are never removed
// from it: key it by a bounded set of names (hosts, services), not by
// values that vary per call.
type Set struct {
	cfg Config
	mu  sync.Mutex
	m   map[string]*Breaker
}

// NewSet returns an empty set whose breakers use cfg. An invalid cfg is an
// error naming the field.
func NewSet(cfg Config) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Set{cfg: cfg, m: make(map[string]*Breaker)}, nil
}

// Get returns the breaker for name, creating it closed if needed.
func (s *Set) Get(name string) *Breaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[name]
	if !ok {
		b, _ = New(name, s.cfg) // cfg was validated by NewSet
		s.m[name] = b
	}
	return b
}

// Names returns the names of the breakers created so far, sorted.
func (s *Set) Names() []string {
	s.mu.Lock()
	names := make([]string, 0, len(s.m))
	for n := range s.m {
		names = append(names, n)
	}
	s.mu.Unlock()
	slices.Sort(names)
	return names
}
