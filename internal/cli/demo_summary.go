package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

// demoTypes are the demo's task types, in the order its tables list them.
var demoTypes = []string{demoPushType, demoWorkerType}

// demoCounts are the task counts of the demo types in this run: the tasks
// that reached a final state during it and all the unfinished ones, so
// that succeeded + dead + retrying + in flight is the number of tasks
// enqueued plus those an earlier run on the same --db left unfinished.
// The attempts are those finished since the run's server started.
type demoCounts struct {
	byType          map[string]map[store.State]int
	total           map[store.State]int
	first, retries  int
	perTypeAttempts map[string][2]int // first attempts, retries
}

// inFlight is the number of tasks of m neither finished nor waiting to
// be retried.
func inFlight(m map[store.State]int) int {
	return m[store.StatePending] + m[store.StateRunning] + m[store.StateScheduled]
}

func (d *demo) counts(ctx context.Context) (*demoCounts, error) {
	tss, err := d.srv.eng.Stats(ctx, time.Since(d.since))
	if err != nil {
		return nil, err
	}
	c := &demoCounts{byType: map[string]map[store.State]int{}, total: map[store.State]int{}, perTypeAttempts: map[string][2]int{}}
	for _, ts := range tss {
		if !slices.Contains(demoTypes, ts.Type) {
			continue // --db may hold other types: they are not the demo's
		}
		m := map[store.State]int{}
		for s, n := range ts.Counts {
			if s.Terminal() {
				// Not below 0 when retention or a purge deleted some.
				n = max(n-d.before[ts.Type][s], 0)
			}
			m[s] += n
			c.total[s] += n
		}
		c.byType[ts.Type] = m
		c.first += ts.FirstAttempts
		c.retries += ts.Retries
		c.perTypeAttempts[ts.Type] = [2]int{ts.FirstAttempts, ts.Retries}
	}
	return c, nil
}

// countBefore records what --db holds of the demo types before the run
// enqueues anything, and says so when it holds some.
func (d *demo) countBefore(ctx context.Context) error {
	c, err := d.counts(ctx)
	if err != nil {
		return fmt.Errorf("read the counts: %w", err)
	}
	d.before = c.byType
	for s, n := range c.total {
		d.found += n
		if !s.Terminal() {
			d.leftover += n
		}
	}
	return nil
}

// runStart is when the run's server started, on the engine's clock (the
// database's, for PostgreSQL).
func (d *demo) runStart() time.Time {
	return d.srv.eng.Now().Add(-time.Since(d.since))
}

func retryRate(first, retries int) string {
	if first+retries == 0 {
		return "-"
	}
	return fmtPercent(float64(retries) / float64(first+retries))
}

// printFound tells, in the intro, that --db already holds tasks of the
// demo types, and how the counts treat them.
func (d *demo) printFound() {
	if d.found == 0 {
		return
	}
	w := d.env.Stdout
	if d.leftover == 0 {
		fmt.Fprintf(w, "Found %d tasks of an earlier run in %s: the counts below are this run's only.\n\n", d.found, redactDSN(d.o.db))
		return
	}
	fmt.Fprintf(w, "Found %d tasks of an earlier run in %s: the counts below are this run's, plus the %d it left unfinished.\n\n",
		d.found, redactDSN(d.o.db), d.leftover)
}

func (d *demo) printSummary(c *demoCounts, dead []store.DeadGroup, sampleID string) {
	w := d.env.Stdout
	taken := ""
	if d.leftover > 0 {
		taken = fmt.Sprintf(", plus %d tasks an earlier run left unfinished", d.leftover)
	}
	fmt.Fprintf(w, "\nSummary after %v: %d tasks enqueued, %d attempts, retry rate %s%s\n\n",
		d.elapsed.Round(100*time.Millisecond), d.enqueued, c.first+c.retries, retryRate(c.first, c.retries), taken)
	tb := newTable("TYPE", "RUN BY", "SUCCEEDED", "RETRYING", "DEAD", "IN FLIGHT", "RETRY RATE").alignRight(2, 3, 4, 5, 6)
	for _, typ := range demoTypes {
		m := c.byType[typ]
		by := map[string]string{demoPushType: "push delivery", demoWorkerType: "in-process Go worker"}[typ]
		a := c.perTypeAttempts[typ]
		tb.add(typ, by, strconv.Itoa(m[store.StateSucceeded]), strconv.Itoa(m[store.StateRetryWaiting]),
			strconv.Itoa(m[store.StateDead]), strconv.Itoa(inFlight(m)), retryRate(a[0], a[1]))
	}
	t := c.total
	tb.add("TOTAL", "", strconv.Itoa(t[store.StateSucceeded]), strconv.Itoa(t[store.StateRetryWaiting]), strconv.Itoa(t[store.StateDead]),
		strconv.Itoa(inFlight(t)), retryRate(c.first, c.retries))
	tb.write(w)
	fmt.Fprintf(w, "\nsucceeded %d, dead %d, still retrying %d, in flight %d\n",
		t[store.StateSucceeded], t[store.StateDead], t[store.StateRetryWaiting], inFlight(t))

	if d.found > 0 {
		fmt.Fprintln(w, "\nDead-letter queue by reason, tasks dead since this run began:")
	} else {
		fmt.Fprintln(w, "\nDead-letter queue by reason:")
	}
	if len(dead) == 0 {
		fmt.Fprintln(w, "  (empty)")
	} else {
		dt := newTable("TYPE", "ERROR", "REASON", "COUNT").alignRight(3)
		for _, g := range dead {
			dt.add(g.Type, orDash(g.ErrorCode), g.Reason, strconv.Itoa(g.Count))
		}
		dt.write(w)
	}
	fmt.Fprintf(w, "\nSimulated API: %s\n", d.sim.summary())

	d.printInspect(dead, sampleID, t[store.StateRetryWaiting]+inFlight(t))
}

// printInspect tells how to look at the dead-letter queue with the CLI,
// with commands built from this run's largest DLQ group and one of its
// tasks, and what becomes of the unfinished tasks a kept database holds.
func (d *demo) printInspect(dead []store.DeadGroup, sampleID string, unfinished int) {
	w := d.env.Stdout
	listCmd, redriveCmd := "retryq dlq list", ""
	if len(dead) > 0 {
		g := dead[0]
		filter := " --type " + shellQuote(g.Type)
		if g.ErrorCode != "" {
			filter += " --error-code " + shellQuote(g.ErrorCode)
		}
		listCmd += filter
		redriveCmd = "retryq dlq redrive" + filter
	}
	getCmd := "retryq tasks get ID"
	if sampleID != "" {
		getCmd = "retryq tasks get " + sampleID
	}
	lines := [][2]string{}
	if d.o.db != "" {
		// The hints are made to be pasted: a password stays out (***).
		db := shellQuote(redactDSN(d.o.db))
		if unfinished > 0 {
			fmt.Fprintf(w, "\nThe %d unfinished tasks wait for the next \"retryq demo --db %s\": nothing else runs them\n", unfinished, db)
			fmt.Fprintf(w, "(%s has no push target any more, the simulated API being gone).\n", demoPushType)
		}
		fmt.Fprintln(w, "\nThe data is kept. Inspect the dead-letter queue with the CLI:")
		lines = append(lines, [2]string{"retryq server --db " + db, "# serves it on 127.0.0.1:7420; then, in another terminal:"})
	} else {
		fmt.Fprintln(w, "\nThis run's database was temporary and is now removed. To keep one and inspect its")
		fmt.Fprintln(w, "dead-letter queue with the CLI:")
		lines = append(lines,
			[2]string{"retryq demo --db sqlite:demo.db", ""},
			[2]string{"retryq server --db sqlite:demo.db", "# afterwards; then, in another terminal:"})
	}
	lines = append(lines,
		[2]string{"retryq dlq summary", "# dead tasks by type, error and reason"},
		[2]string{listCmd, "# the tasks of the largest group"})
	if d.o.db != "" {
		lines = append(lines, [2]string{getCmd, "# one of them, with its attempt history"})
		if redriveCmd != "" {
			lines = append(lines, [2]string{redriveCmd, "# back to pending, once the cause is fixed"})
		}
	} else {
		lines = append(lines, [2]string{"retryq tasks get ID", "# a task with its attempt history"})
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", strings.TrimRight(fmt.Sprintf("%-*s  %s", width, l[0], l[1]), " "))
	}
	fmt.Fprintf(w, "While a demo runs, add --server with the API address it printed at the start.\n")
}
