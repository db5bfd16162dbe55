package storetest

import (
	"fmt"
	"sync"
	"time"

	"github.com/retryq/retryq/store"
)

var redriveOnceTests = []testCase{
	{"Dead/RedriveTakesEachTaskOnce", testRedriveTakesEachTaskOnce},
}

// testRedriveTakesEachTaskOnce: one RedriveDead call, with a Limit past
// the dead tasks it matches, takes each of them at most once, though it
// runs in rounds while a worker fetches the tasks its first rounds
// redrove and they die again: a call takes only the tasks that had died
// when it began. Its rounds went on past the tasks that matched then,
// met the tasks that had died again since and redrove them a second time
// (counted twice), with a Limit or, when the deaths' clock went back,
// without one.
func testRedriveTakesEachTaskOnce(e *env) {
	const n = 2100 // five rounds of 500 (both backends)
	tasks := make([]store.NewTask, n)
	for i := range tasks {
		tasks[i] = nt(fmt.Sprintf("ro_%04d", i), "ro")
	}
	e.insert(base, tasks...)
	var outs []store.Outcome
	for len(outs) < n {
		got := e.fetch(base, 500, "ro")
		if len(got) == 0 {
			e.t.Fatalf("fetched %d of %d tasks", len(outs), n)
		}
		for _, t := range got {
			outs = append(outs, kill(t, "E", store.DeadMaxAttempts))
		}
	}
	errs, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: outs, Now: base})
	e.noErr("RecordOutcomes", err)
	for i, err := range errs {
		e.noErr("outcome "+outs[i].TaskID, err)
	}

	// A worker fetches the redriven tasks as they come and kills them
	// again, later than they first died, until the call returns.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var killed int
	var killErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		died := base.Add(2 * time.Hour)
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := e.s.FetchTasks(e.ctx, store.FetchParams{Types: []string{"ro"}, Limit: 20, WorkerID: worker,
				LeaseDuration: leaseDur, Now: died})
			if err != nil {
				killErr = fmt.Errorf("FetchTasks: %w", err)
				return
			}
			outs := make([]store.Outcome, len(got))
			for i, t := range got {
				outs[i] = kill(t, "E2", store.DeadMaxAttempts)
			}
			if len(outs) > 0 {
				if _, err := e.s.RecordOutcomes(e.ctx, store.OutcomeParams{Outcomes: outs, Now: died}); err != nil {
					killErr = fmt.Errorf("RecordOutcomes: %w", err)
					return
				}
				killed += len(outs)
			}
		}
	}()
	redriven, err := e.s.RedriveDead(e.ctx, store.DeadFilter{Type: "ro", Limit: 2 * n, Now: base.Add(time.Hour)})
	close(stop)
	wg.Wait()
	e.noErr("RedriveDead", err)
	e.noErr("the worker", killErr)
	e.eq(fmt.Sprintf("tasks redriven by one call (the worker killed %d again meanwhile)", killed), redriven, n)
	c := e.counts()
	e.eq("tasks pending or dead again", c[store.StatePending]+c[store.StateRunning]+c[store.StateDead], n)
}
