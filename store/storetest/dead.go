package storetest

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

var deadTests = []testCase{
	{"Dead/List", testListDead},
	{"Dead/Summary", testDeadSummary},
	{"Dead/Redrive", testRedrive},
	{"Dead/Purge", testPurge},
	{"Dead/LimitTakesOldestDeath", testDeadLimitOrder},
	{"Dead/NegativeLimit", testNegativeLimit},
	{"Dead/NoErrorCode", testDeadNoErrorCode},
	{"Dead/IDsBound", testDeadIDsBound},
	{"Dead/SummaryTieOrder", testDeadSummaryTies},
	{"Dead/SummaryFilterAndLimit", testDeadSummaryFilterAndLimit},
	{"Dead/RedrivesAndPurgeRacing", testRedrivesAndPurgeRacing},
}

// testDeadIDsBound: a DeadFilter may name up to store.MaxDeadIDs ids, in
// every method that takes one; one more is ErrInvalid and changes nothing.
func testDeadIDsBound(e *env) {
	e.deadFixture()
	idsOf := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("x_%05d", i)
		}
		ids[n-1] = "d_1"
		return ids
	}
	full, over := idsOf(store.MaxDeadIDs), idsOf(store.MaxDeadIDs+1)
	now := base.Add(time.Hour)
	e.eqIDs("ListDead of MaxDeadIDs ids", e.listDead(store.DeadFilter{IDs: full, Limit: 10}), "d_1")
	_, _, err := e.s.ListDead(e.ctx, store.DeadFilter{IDs: over, Limit: 10})
	e.isErr("ListDead of MaxDeadIDs+1 ids", err, store.ErrInvalid)
	_, err = e.s.RedriveDead(e.ctx, store.DeadFilter{IDs: over, Now: now})
	e.isErr("RedriveDead of MaxDeadIDs+1 ids", err, store.ErrInvalid)
	_, err = e.s.PurgeDead(e.ctx, store.DeadFilter{IDs: over, Now: now})
	e.isErr("PurgeDead of MaxDeadIDs+1 ids", err, store.ErrInvalid)
	e.get("d_1", store.StateDead)
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{IDs: full, Now: now})
	e.noErr("RedriveDead of MaxDeadIDs ids", err)
	e.eq("redriven", n, 1)
	full[len(full)-1] = "d_2"
	n, err = e.s.PurgeDead(e.ctx, store.DeadFilter{IDs: full, Now: now})
	e.noErr("PurgeDead of MaxDeadIDs ids", err)
	e.eq("purged", n, 1)
}

// testDeadSummaryTies: groups of equal size come in type, code and reason
// order, compared bytewise (whatever the database's collation), and an
// error code of "" sorts first.
func testDeadSummaryTies(e *env) {
	groups := []store.DeadGroup{ // in the expected order
		{Type: "B", ErrorCode: "", Reason: store.DeadMaxAttempts},
		{Type: "B", ErrorCode: "Z", Reason: store.DeadMaxAttempts},
		{Type: "B", ErrorCode: "a", Reason: store.DeadMaxAttempts},
		{Type: "B", ErrorCode: "a", Reason: store.DeadNonRetryable},
		{Type: "B", ErrorCode: "é", Reason: store.DeadMaxAttempts},
		{Type: "a", ErrorCode: "E", Reason: store.DeadMaxAttempts},
	}
	for i := len(groups) - 1; i >= 0; i-- { // inserted against the order
		g := &groups[i]
		died := base.Add(time.Duration(i) * time.Minute)
		t := e.start(died, nt(fmt.Sprintf("s_%d", i), g.Type))
		e.mustRecord(died, kill(t, g.ErrorCode, g.Reason))
		g.Count, g.Oldest, g.Newest = 1, died, died
	}
	sum, err := e.s.DeadSummary(e.ctx, store.SummaryParams{})
	e.noErr("DeadSummary", err)
	got := sum.Groups
	for i := range got {
		got[i].Oldest, got[i].Newest = got[i].Oldest.UTC(), got[i].Newest.UTC()
	}
	e.eq("summary", got, groups)
}

var retentionTests = []testCase{
	{"Retention/DeleteFinished", testDeleteFinished},
	{"Retention/CountedOnce", testRetentionCountedOnce},
	{"Retention/SparesRedrivenTasks", testRetentionSparesRedrivenTasks},
}

// deadFixture creates six dead tasks and some live ones:
//
//	d_1..d_3 email E1 max_attempts  died at +1m, +2m, +3m
//	d_4      email E2 non_retryable died at +4m
//	d_5, d_6 sms   E1 max_attempts  died at +5m, +6m
func (e *env) deadFixture() {
	e.t.Helper()
	mk := func(id, typ, code, reason string, died time.Duration) {
		t := e.start(base.Add(died), nt(id, typ))
		e.mustRecord(base.Add(died), kill(t, code, reason))
	}
	mk("d_1", "email", "E1", store.DeadMaxAttempts, 1*time.Minute)
	mk("d_2", "email", "E1", store.DeadMaxAttempts, 2*time.Minute)
	mk("d_3", "email", "E1", store.DeadMaxAttempts, 3*time.Minute)
	mk("d_4", "email", "E2", store.DeadNonRetryable, 4*time.Minute)
	mk("d_5", "sms", "E1", store.DeadMaxAttempts, 5*time.Minute)
	mk("d_6", "sms", "E1", store.DeadMaxAttempts, 6*time.Minute)
	e.makeState(base, nt("l_done", "email"), store.StateSucceeded)
	e.makeState(base, nt("l_cancelled", "email"), store.StateCancelled)
	e.makeState(base, nt("l_pending", "email"), store.StatePending)
}

func (e *env) listDead(f store.DeadFilter) []store.Task {
	e.t.Helper()
	var all []store.Task
	for pages := 0; ; pages++ {
		if pages > 100 {
			e.t.Fatal("ListDead pagination does not end")
		}
		page, next, err := e.s.ListDead(e.ctx, f)
		e.noErr("ListDead", err)
		if len(page) > f.Limit {
			e.t.Fatalf("ListDead returned %d tasks, limit %d", len(page), f.Limit)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		f.Cursor = next
	}
}

func testListDead(e *env) {
	e.deadFixture()
	e.eqIDs("all", e.listDead(store.DeadFilter{Limit: 2}), "d_6", "d_5", "d_4", "d_3", "d_2", "d_1")
	e.eqIDs("type", e.listDead(store.DeadFilter{Type: "email", Limit: 3}), "d_4", "d_3", "d_2", "d_1")
	e.eqIDs("error code", e.listDead(store.DeadFilter{ErrorCode: "E1", Limit: 10}), "d_6", "d_5", "d_3", "d_2", "d_1")
	e.eqIDs("reason", e.listDead(store.DeadFilter{Reason: store.DeadNonRetryable, Limit: 10}), "d_4")
	e.eqIDs("since (inclusive)", e.listDead(store.DeadFilter{Since: base.Add(4 * time.Minute), Limit: 10}), "d_6", "d_5", "d_4")
	e.eqIDs("before (exclusive)", e.listDead(store.DeadFilter{Before: base.Add(3 * time.Minute), Limit: 10}), "d_2", "d_1")
	e.eqIDs("ids", e.listDead(store.DeadFilter{IDs: []string{"d_2", "d_5", "l_done", "nope"}, Limit: 10}), "d_5", "d_2")
	e.eqIDs("combined", e.listDead(store.DeadFilter{Type: "email", ErrorCode: "E1", Since: base.Add(2 * time.Minute), Limit: 1}), "d_3", "d_2")
	got := e.listDead(store.DeadFilter{IDs: []string{"d_4"}, Limit: 1})
	e.sameTask("listed dead task", got[0], e.get("d_4", ""))
	_, _, err := e.s.ListDead(e.ctx, store.DeadFilter{})
	e.isErr("ListDead(Limit 0)", err, store.ErrInvalid)
}

func testDeadSummary(e *env) {
	e.deadFixture()
	sum := func(since time.Time) []store.DeadGroup {
		e.t.Helper()
		s, err := e.s.DeadSummary(e.ctx, store.SummaryParams{Since: since})
		e.noErr("DeadSummary", err)
		gs := s.Groups
		for i := 1; i < len(gs); i++ {
			if gs[i-1].Count < gs[i].Count {
				e.t.Fatalf("DeadSummary not ordered largest group first: %+v", gs)
			}
		}
		for i := range gs {
			gs[i].Oldest, gs[i].Newest = gs[i].Oldest.UTC(), gs[i].Newest.UTC()
		}
		sort.SliceStable(gs, func(i, j int) bool {
			if gs[i].Count != gs[j].Count {
				return gs[i].Count > gs[j].Count
			}
			return fmt.Sprint(gs[i].Type, gs[i].ErrorCode) < fmt.Sprint(gs[j].Type, gs[j].ErrorCode)
		})
		return gs
	}
	e.eq("summary", sum(time.Time{}), []store.DeadGroup{
		{Type: "email", ErrorCode: "E1", Reason: store.DeadMaxAttempts, Count: 3, Oldest: base.Add(time.Minute), Newest: base.Add(3 * time.Minute)},
		{Type: "sms", ErrorCode: "E1", Reason: store.DeadMaxAttempts, Count: 2, Oldest: base.Add(5 * time.Minute), Newest: base.Add(6 * time.Minute)},
		{Type: "email", ErrorCode: "E2", Reason: store.DeadNonRetryable, Count: 1, Oldest: base.Add(4 * time.Minute), Newest: base.Add(4 * time.Minute)},
	})
	e.eq("summary since +3m", sum(base.Add(3*time.Minute)), []store.DeadGroup{
		{Type: "sms", ErrorCode: "E1", Reason: store.DeadMaxAttempts, Count: 2, Oldest: base.Add(5 * time.Minute), Newest: base.Add(6 * time.Minute)},
		{Type: "email", ErrorCode: "E1", Reason: store.DeadMaxAttempts, Count: 1, Oldest: base.Add(3 * time.Minute), Newest: base.Add(3 * time.Minute)},
		{Type: "email", ErrorCode: "E2", Reason: store.DeadNonRetryable, Count: 1, Oldest: base.Add(4 * time.Minute), Newest: base.Add(4 * time.Minute)},
	})
	e.eq("summary of the future", len(sum(base.Add(time.Hour))), 0)
}

func testRedrive(e *env) {
	e.deadFixture()
	now := base.Add(time.Hour)
	redrive := func(f store.DeadFilter) int {
		e.t.Helper()
		f.Now = now
		n, err := e.s.RedriveDead(e.ctx, f)
		e.noErr("RedriveDead", err)
		return n
	}
	e.eq("nothing matches", redrive(store.DeadFilter{Type: "nope"}), 0)
	e.eq("by type", redrive(store.DeadFilter{Type: "sms"}), 2)
	for _, id := range []string{"d_5", "d_6"} {
		got := e.get(id, store.StatePending)
		e.eq("Attempt", got.Attempt, 0)
		e.eq("LastError", got.LastError, (*store.ErrorInfo)(nil))
		e.eq("DeadReason", got.DeadReason, "")
		e.eqTime("UpdatedAt", got.UpdatedAt, now)
		e.eq("history kept", len(e.attempts(id)), 1)
	}
	e.eq("by ids (live tasks never move)", redrive(store.DeadFilter{IDs: []string{"d_4", "l_done", "l_cancelled", "d_5"}}), 1)
	e.get("d_4", store.StatePending)
	e.get("l_done", store.StateSucceeded)
	e.get("l_cancelled", store.StateCancelled)
	e.eq("with a limit", redrive(store.DeadFilter{ErrorCode: "E1", Limit: 2}), 2)
	e.eq("by reason and since", redrive(store.DeadFilter{Reason: store.DeadMaxAttempts, Since: base.Add(2 * time.Minute)}), 1)
	left := e.listDead(store.DeadFilter{Limit: 10})
	e.eq("dead left", len(left), 0)
	_, err := e.s.RedriveDead(e.ctx, store.DeadFilter{})
	e.isErr("RedriveDead without Now", err, store.ErrInvalid)
}

func testPurge(e *env) {
	e.deadFixture()
	purge := func(f store.DeadFilter) int {
		e.t.Helper()
		n, err := e.s.PurgeDead(e.ctx, f)
		e.noErr("PurgeDead", err)
		return n
	}
	e.eq("older than +3m", purge(store.DeadFilter{Before: base.Add(3 * time.Minute)}), 2)
	for _, id := range []string{"d_1", "d_2"} {
		e.notFound(id)
		_, err := e.s.ListAttempts(e.ctx, id)
		e.isErr("history of a purged task", err, store.ErrNotFound)
	}
	e.eq("sms with a limit", purge(store.DeadFilter{Type: "sms", Limit: 1}), 1)
	e.eq("by ids", purge(store.DeadFilter{IDs: []string{"d_3", "l_done"}}), 1)
	e.eqIDs("dead left", e.listDead(store.DeadFilter{Limit: 10}), "d_6", "d_4")
	e.eq("all", purge(store.DeadFilter{}), 2)
	e.eq("nothing left", purge(store.DeadFilter{}), 0)
	for _, id := range []string{"l_done", "l_cancelled", "l_pending"} {
		e.get(id, "")
	}
}

func testDeleteFinished(e *env) {
	var all []string
	mk := func(prefix string, st store.State, count int) {
		for i := range count {
			id := fmt.Sprintf("%s_%d", prefix, i)
			n := nt(id, prefix)
			n.IdempotencyKey = "key-" + id
			e.makeState(base.Add(time.Duration(i+1)*time.Minute), n, st)
			all = append(all, id)
		}
	}
	mk("s", store.StateSucceeded, 5) // finished at +1m..+5m
	mk("c", store.StateCancelled, 3) // +1m..+3m
	mk("d", store.StateDead, 2)      // +1m, +2m
	live := map[string]store.State{}
	for _, st := range []store.State{store.StateScheduled, store.StatePending, store.StateRunning, store.StateRetryWaiting} {
		id := "live_" + string(st)
		e.makeState(base, nt(id, "live_"+string(st)), st)
		live[id] = st
	}
	del := func(p store.RetentionParams) store.RetentionResult {
		e.t.Helper()
		r, err := e.s.DeleteFinished(e.ctx, p)
		e.noErr("DeleteFinished", err)
		return r
	}
	far := base.Add(24 * time.Hour)
	e.eq("zero cut-offs", del(store.RetentionParams{}), store.RetentionResult{})
	e.eq("first pass", del(store.RetentionParams{SucceededBefore: base.Add(3 * time.Minute), DeadBefore: far}),
		store.RetentionResult{Succeeded: 2, Dead: 2})
	for _, id := range []string{"s_0", "s_1", "d_0", "d_1"} {
		e.notFound(id)
		_, err := e.s.ListAttempts(e.ctx, id)
		e.isErr("history of a deleted task", err, store.ErrNotFound)
	}
	e.get("s_2", store.StateSucceeded)
	p := store.RetentionParams{SucceededBefore: far, CancelledBefore: far, DeadBefore: far, Limit: 2}
	e.eq("limited pass", del(p), store.RetentionResult{Succeeded: 2, Cancelled: 2})
	for _, id := range []string{"s_2", "s_3", "c_0", "c_1"} { // oldest first
		e.notFound(id)
	}
	e.get("s_4", store.StateSucceeded)
	e.get("c_2", store.StateCancelled)
	e.eq("second limited pass", del(p), store.RetentionResult{Succeeded: 1, Cancelled: 1})
	e.eq("nothing left", del(p), store.RetentionResult{})
	for id, st := range live {
		e.get(id, st)
	}
	// The idempotency key of a deleted task is free again.
	n := nt("s_0_again", "s")
	n.IdempotencyKey = "key-s_0"
	res := e.insert(far, n)
	e.eq("Duplicate after deletion", res[0].Duplicate, false)

	// Every deletion was counted, per type and final state; a type whose
	// tasks are all gone still shows its count. A purge is not retention.
	e.makeState(base, nt("p_0", "p"), store.StateDead)
	purged, err := e.s.PurgeDead(e.ctx, store.DeadFilter{Type: "p"})
	e.noErr("PurgeDead", err)
	e.eq("purged", purged, 1)
	got := map[string]map[store.State]int{}
	st, err := e.s.Stats(e.ctx, store.StatsParams{})
	e.noErr("Stats", err)
	for _, ts := range st {
		if ts.RetentionDeleted != nil {
			got[ts.Type] = ts.RetentionDeleted
		}
	}
	e.eq("RetentionDeleted", got, map[string]map[store.State]int{
		"s": {store.StateSucceeded: 5},
		"c": {store.StateCancelled: 3},
		"d": {store.StateDead: 2},
	})
}

// testRetentionCountedOnce: two retention passes racing over the same
// tasks delete each task once and count it once.
func testRetentionCountedOnce(e *env) {
	const n = 40
	for i := range n {
		e.makeState(base, nt(fmt.Sprintf("r_%02d", i), "r"), store.StateSucceeded)
	}
	p := store.RetentionParams{SucceededBefore: base.Add(time.Hour), Limit: 7}
	var wg sync.WaitGroup
	var mu sync.Mutex
	deleted := 0
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n { // bounded: each pass deletes at least one task until none is left
				r, err := e.s.DeleteFinished(e.ctx, p)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				deleted += r.Succeeded
				mu.Unlock()
				if r.Succeeded == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.noErr("concurrent DeleteFinished", err)
	}
	e.eq("deleted in all", deleted, n)
	counted := e.retentionDeleted("r", store.StateSucceeded)
	e.eq("counted", counted, n)
}

// testDeadLimitOrder: with a Limit, RedriveDead and PurgeDead take the
// tasks that died first (UpdatedAt, then id), whatever their ids: an
// operator redriving or purging the DLQ a batch at a time works through it
// in the order it filled.
func testDeadLimitOrder(e *env) {
	// Ids run against the order of death: o_3 died first.
	for i, id := range []string{"o_3", "o_2", "o_1"} {
		e.makeState(base.Add(time.Duration(i)*time.Minute), nt(id, "ord"), store.StateDead)
	}
	e.makeState(base.Add(time.Minute), nt("o_0", "ord"), store.StateDead) // died with o_2: the id breaks the tie
	now := base.Add(time.Hour)
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "ord", Limit: 1, Now: now})
	e.noErr("RedriveDead(Limit 1)", err)
	e.eq("redriven", n, 1)
	e.get("o_3", store.StatePending)
	n, err = e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "ord", Limit: 1, Now: now})
	e.noErr("RedriveDead(Limit 1) again", err)
	e.eq("redriven", n, 1)
	e.get("o_0", store.StatePending)
	e.get("o_2", store.StateDead)
	n, err = e.s.PurgeDead(e.ctx, store.DeadFilter{Type: "ord", Limit: 1, Now: now})
	e.noErr("PurgeDead(Limit 1)", err)
	e.eq("purged", n, 1)
	e.notFound("o_2")
	e.get("o_1", store.StateDead)
}

// testNegativeLimit: a negative Limit on a bulk change is ErrInvalid and
// changes nothing; only 0 means "all" (store.CheckLimit).
func testNegativeLimit(e *env) {
	for i := range 3 {
		e.makeState(base, nt(fmt.Sprintf("d_%d", i), "neg"), store.StateDead)
	}
	e.makeState(base, nt("s_0", "neg"), store.StateSucceeded)
	now := base.Add(time.Hour)
	_, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "neg", Limit: -1, Now: now})
	e.isErr("RedriveDead(Limit -1)", err, store.ErrInvalid)
	_, err = e.s.PurgeDead(e.ctx, store.DeadFilter{Type: "neg", Limit: -1, Now: now})
	e.isErr("PurgeDead(Limit -1)", err, store.ErrInvalid)
	_, err = e.s.DeleteFinished(e.ctx, store.RetentionParams{SucceededBefore: now, CancelledBefore: now, DeadBefore: now, Limit: -1})
	e.isErr("DeleteFinished(Limit -1)", err, store.ErrInvalid)
	e.eq("dead tasks left", e.counts()[store.StateDead], 3)
	e.eq("succeeded tasks left", e.counts()[store.StateSucceeded], 1)
}

// testDeadNoErrorCode: NoErrorCode selects the dead tasks whose last error
// has no code, the summary's group with an empty ErrorCode, in ListDead,
// RedriveDead and PurgeDead; with ErrorCode set as well nothing matches.
func testDeadNoErrorCode(e *env) {
	e.deadFixture()
	for i, id := range []string{"n_1", "n_2", "n_3"} {
		died := base.Add(time.Duration(10+i) * time.Minute)
		e.mustRecord(died, kill(e.start(died, nt(id, "webhook")), "", store.DeadNonRetryable))
	}
	var groups int
	sum, err := e.s.DeadSummary(e.ctx, store.SummaryParams{})
	e.noErr("DeadSummary", err)
	for _, g := range sum.Groups {
		if g.ErrorCode == "" {
			groups++
			e.eq("tasks in the no-code group", g.Count, 3)
		}
	}
	e.eq("summary groups without a code", groups, 1)
	e.eqIDs("ListDead NoErrorCode", e.listDead(store.DeadFilter{NoErrorCode: true, Limit: 2, Now: base}), "n_3", "n_2", "n_1")
	e.eqIDs("ListDead NoErrorCode and ErrorCode", e.listDead(store.DeadFilter{NoErrorCode: true, ErrorCode: "E1", Limit: 10, Now: base}))
	n, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "webhook", NoErrorCode: true, Limit: 2, Now: base.Add(time.Hour)})
	e.noErr("RedriveDead", err)
	e.eq("redriven", n, 2)
	e.get("n_1", store.StatePending)
	e.get("n_2", store.StatePending)
	e.get("d_4", store.StateDead)
	n, err = e.s.PurgeDead(e.ctx, store.DeadFilter{NoErrorCode: true, Now: base.Add(time.Hour)})
	e.noErr("PurgeDead", err)
	e.eq("purged", n, 1)
	e.notFound("n_3")
	e.eq("dead left", len(e.listDead(store.DeadFilter{Limit: 100, Now: base})), 6)
}
