package storetest

import (
	"time"

	"github.com/retryq/retryq/store"
)

// testDeadSummaryFilterAndLimit: the summary counts what a DeadFilter with
// the same fields selects, returns at most Limit groups, the largest, and
// its totals count every matching group, those past the limit included.
func testDeadSummaryFilterAndLimit(e *env) {
	e.deadFixture() // email/E1/max_attempts 3, sms/E1/max_attempts 2, email/E2/non_retryable 1
	type want struct {
		first         string // type/code of the first group, "" for none
		groups, total int    // the groups returned
		count, tasks  int    // GroupCount, TaskCount
	}
	check := func(what string, p store.SummaryParams, w want) {
		e.t.Helper()
		s, err := e.s.DeadSummary(e.ctx, p)
		e.noErr("DeadSummary "+what, err)
		first := ""
		if len(s.Groups) > 0 {
			first = s.Groups[0].Type + "/" + s.Groups[0].ErrorCode
		}
		got := want{first: first, groups: len(s.Groups), count: s.GroupCount, tasks: s.TaskCount}
		for _, g := range s.Groups {
			got.total += g.Count
		}
		e.eq(what, got, w)
	}
	check("all", store.SummaryParams{}, want{"email/E1", 3, 6, 3, 6})
	check("limit 1", store.SummaryParams{Limit: 1}, want{"email/E1", 1, 3, 3, 6})
	check("limit 2", store.SummaryParams{Limit: 2}, want{"email/E1", 2, 5, 3, 6})
	check("type", store.SummaryParams{Type: "email"}, want{"email/E1", 2, 4, 2, 4})
	check("type, limit 1", store.SummaryParams{Type: "email", Limit: 1}, want{"email/E1", 1, 3, 2, 4})
	check("error code", store.SummaryParams{ErrorCode: "E1"}, want{"email/E1", 2, 5, 2, 5})
	check("reason", store.SummaryParams{Reason: store.DeadNonRetryable}, want{"email/E2", 1, 1, 1, 1})
	check("no error code", store.SummaryParams{NoErrorCode: true}, want{"", 0, 0, 0, 0})
	check("since", store.SummaryParams{Since: base.Add(3 * time.Minute)}, want{"sms/E1", 3, 4, 3, 4})
	check("since and type", store.SummaryParams{Type: "sms", Since: base.Add(6 * time.Minute)}, want{"sms/E1", 1, 1, 1, 1})
	check("unknown type", store.SummaryParams{Type: "nope"}, want{"", 0, 0, 0, 0})
	_, err := e.s.DeadSummary(e.ctx, store.SummaryParams{Limit: -1})
	e.isErr("DeadSummary(Limit -1)", err, store.ErrInvalid)
}
