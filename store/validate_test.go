package store

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCheckNewTasks(t *testing.T) {
	ok := func(id string) NewTask { return NewTask{ID: id, Type: "a"} }
	keyed := func(id, key string) NewTask { return NewTask{ID: id, Type: "a", IdempotencyKey: key} }
	for _, good := range [][]NewTask{
		nil,
		{ok("a")},
		{ok("a"), ok("b")},
		{keyed("a", "k"), keyed("a", "k")}, // a duplicate by key, not a second row
		{{ID: "a", Type: "a", Lease: &NewLease{LeaseID: "L", Duration: time.Second}}},
	} {
		if err := CheckNewTasks(good); err != nil {
			t.Errorf("CheckNewTasks(%v) = %v", good, err)
		}
	}
	for _, c := range []struct {
		tasks []NewTask
		want  string
	}{
		{[]NewTask{{Type: "a"}}, "task 0"},
		{[]NewTask{ok("a"), {ID: "b"}}, "task 1"},
		{[]NewTask{ok("a\xff")}, "id"},
		{[]NewTask{{ID: "a", Type: "a\x00"}}, "type"},
		{[]NewTask{keyed("a", "\xc3")}, "idempotency key"},
		{[]NewTask{{ID: "a", Type: "a", Lease: &NewLease{Duration: time.Second}}}, "lease id"},
		{[]NewTask{{ID: "a", Type: "a", Lease: &NewLease{LeaseID: "L"}}}, "positive duration"},
		{[]NewTask{ok("a"), ok("b"), ok("a")}, `task 2: invalid argument: id "a" twice`},
		{[]NewTask{keyed("a", "k1"), keyed("a", "k2")}, "twice"},
	} {
		err := CheckNewTasks(c.tasks)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckNewTasks(%v) = %v, want ErrInvalid mentioning %q", c.tasks, err, c.want)
		}
	}
}

func TestCheckNow(t *testing.T) {
	err := CheckNow(time.Time{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "now is the zero time") {
		t.Errorf("CheckNow(zero) = %v, want ErrInvalid naming Now", err)
	}
	if err := CheckNow(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Errorf("CheckNow(a real time) = %v, want nil", err)
	}
}

func TestCheckFetch(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ok := FetchParams{Limit: 1, LeaseDuration: time.Second, Now: now}
	for _, tc := range []struct {
		what string
		p    func(p *FetchParams)
		want string // in the error; "" = valid
	}{
		{"valid", func(p *FetchParams) {}, ""},
		{"zero limit", func(p *FetchParams) { p.Limit = 0 }, "limit must be positive"},
		{"zero now", func(p *FetchParams) { p.Now = time.Time{} }, "now is the zero time"},
		{"no lease", func(p *FetchParams) { p.LeaseDuration = 0 }, "lease duration must be positive"},
		{"too many types", func(p *FetchParams) {
			for i := range MaxFetchTypes + 1 {
				p.Types = append(p.Types, fmt.Sprint(i))
			}
		}, "at most 256 types"},
		{"one type many times", func(p *FetchParams) {
			for range MaxFetchTypes + 1 {
				p.Types = append(p.Types, "a")
			}
		}, ""},
	} {
		p := ok
		tc.p(&p)
		_, err := CheckFetch(p)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.what, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrInvalid with %q", tc.what, err, tc.want)
		}
	}
	types, _ := CheckFetch(FetchParams{Limit: 1, LeaseDuration: time.Second, Now: now, Types: []string{"b", "a", "b"}})
	if !slices.Equal(types, []string{"a", "b"}) {
		t.Errorf("types = %q, want the distinct types sorted", types)
	}
}

func TestCheckTextAndKeys(t *testing.T) {
	for _, c := range []struct {
		what string
		err  error
		ok   bool
	}{
		{"text", CheckText("x", "a", "é", ""), true},
		{"a NUL byte", CheckText("x", "a", "b\x00"), false},
		{"invalid UTF-8", CheckText("x", "\xff"), false},
		{"a key at the bound", CheckKey("x", strings.Repeat("k", MaxKeyBytes)), true},
		{"a key past the bound", CheckKey("x", strings.Repeat("k", MaxKeyBytes+1)), false},
		{"a cursor", CheckCursor("t_1"), true},
		{"an odd cursor", CheckCursor("t\x00"), false},
		{"a type", CheckTypeConfig(TypeConfig{Type: "a", Priority: math.MinInt32}), true},
		{"a type without a name", CheckTypeConfig(TypeConfig{}), false},
		{"a type with a 33-bit priority", CheckTypeConfig(TypeConfig{Type: "a", Priority: math.MaxInt32 + 1}), false},
		{"a type with an odd name", CheckTypeConfig(TypeConfig{Type: "a\xfe"}), false},
		{"a task id past the bound", CheckNewTasks([]NewTask{{ID: strings.Repeat("i", MaxKeyBytes+1), Type: "a"}}), false},
		{"a fetch by an odd worker", func() error {
			_, err := CheckFetch(FetchParams{Limit: 1, LeaseDuration: time.Second, Now: time.Unix(1, 0), WorkerID: "w\x00"})
			return err
		}(), false},
		{"a fetch of an odd type", func() error {
			_, err := CheckFetch(FetchParams{Limit: 1, LeaseDuration: time.Second, Now: time.Unix(1, 0), Types: []string{"a", "\xff"}})
			return err
		}(), false},
	} {
		if c.ok && c.err != nil {
			t.Errorf("%s: %v", c.what, c.err)
		}
		if !c.ok && !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.what, c.err)
		}
	}
}
