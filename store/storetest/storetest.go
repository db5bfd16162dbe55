// Package storetest is the conformance suite of the store.Store contract.
// Every backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := mybackend.Open(t.Context(), freshEmptyDatabase(t))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// open is called once per subtest and must return a store over a fresh,
// empty, migrated database; subtests run in parallel, so stores must not
// share state. Run closes each store when its subtest ends (ignoring the
// error, since some subtests close it themselves); open only needs to
// register the cleanup of anything else it created (t.Cleanup).
//
// The suite is deterministic: it passes its own clock (a fixed base time
// advanced explicitly) in every params struct and never sleeps. All times
// it uses are whole milliseconds, so backends may store microseconds.
package storetest

import (
	"testing"

	"github.com/retryq/retryq/store"
)

type testCase struct {
	name string
	fn   func(e *env)
}

// tests lists every subtest of the suite, grouped by area.
var tests = concat(insertTests, fetchTests, outcomeTests, leaseTests, promoteTests,
	readTests, cancelRetryTests, deadTests, retentionTests, statsTests, metaTests, lifecycleTests, zeroNowTests, timeTests,
	oddTextTests, listBytesTests, fetchBytesTests, fetchTypesTests, contractTests, contractTimeTests, contractMoreTests,
	nilContextTests, redriveOnceTests)

func concat(groups ...[]testCase) []testCase {
	var all []testCase
	for _, g := range groups {
		all = append(all, g...)
	}
	return all
}

// Run runs the conformance suite against the stores open returns.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			if s == nil {
				t.Fatal("open returned a nil store")
			}
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(newEnv(t, s))
		})
	}
}
