package cli

import (
	"context"
	"time"
)

// httpDrain is the longest the shutdown waits for HTTP requests in flight
// once it stopped accepting them (less when --shutdown-timeout leaves less).
const httpDrain = 10 * time.Second

// reportWindow is the longest the shutdown keeps accepting requests for the
// reports of the leases this node handed to pull workers (less when
// --shutdown-timeout leaves less).
const reportWindow = 10 * time.Second

// shutdownReserve is the part of the shutdown timeout kept, after the
// graces end, for giving back what was cut short and for the engine's
// last writes (outcomes, the registry row, the leadership): a quarter of
// it, at most 5 s.
func shutdownReserve(timeout time.Duration) time.Duration {
	return min(timeout/4, 5*time.Second)
}

// shutdownTimeout returns the bound of the whole shutdown.
func (rs *runningServer) shutdownTimeout() time.Duration {
	if rs.timeout <= 0 {
		return defaultShutdownTimeout
	}
	return rs.timeout
}

// setStage records what the shutdown is doing, for the log of a shutdown
// cut short.
func (rs *runningServer) setStage(s string) { rs.stage.Store(s) }

// stageName returns what the shutdown is doing.
func (rs *runningServer) stageName() string {
	s, _ := rs.stage.Load().(string)
	return s
}

// shutdown makes the node take no new work (pull leases are refused,
// waiting long polls answered at once with no tasks, /readyz not ready,
// push fetching stopped; deliveries in flight go on) and, while leases it
// handed to pull workers are unreported, keeps serving requests so that
// those workers can still complete, fail or heartbeat them, for up to
// reportWindow. Then it stops accepting requests, lets those in flight
// finish for up to httpDrain, closes what is left, and only then the
// engine (its in-process workers' and push deliveries' graces, releases,
// outcomes, registry row and leadership) and the database. A quarter of
// the shutdown timeout (at most 5 s) before it runs out the window and
// the graces end (Engine.EndGraces): what still runs is cancelled and its
// task released, the attempt not counted. The caller bounds the wait for
// what comes after (runServer exits at the timeout).
func (rs *runningServer) shutdown() {
	began := time.Now()
	timeout := rs.shutdownTimeout()
	graceEnd := began.Add(timeout - shutdownReserve(timeout))
	rs.eng.BeginShutdown()
	cut := time.AfterFunc(time.Until(graceEnd), func() {
		rs.log.Warn("shutdown timeout near: cutting the drain short; push deliveries and handlers still running are cancelled and their tasks released",
			"stage", rs.stageName(), "shutdown_timeout", timeout, "after", time.Since(began).Round(time.Millisecond))
		rs.eng.EndGraces()
	})
	defer cut.Stop()
	reportEnd := began.Add(reportWindow)
	if graceEnd.Before(reportEnd) {
		reportEnd = graceEnd
	}
	rs.awaitPullReports(began, reportEnd)
	rs.setStage("draining HTTP requests")
	httpEnd := time.Now().Add(httpDrain)
	if graceEnd.Before(httpEnd) {
		httpEnd = graceEnd
	}
	sctx, cancel := context.WithDeadline(context.Background(), httpEnd)
	defer cancel()
	if err := rs.http.Shutdown(sctx); err != nil {
		rs.log.Warn("http shutdown: requests still running; closing their connections",
			"after", time.Since(began).Round(time.Millisecond), "err", err)
		_ = rs.http.Close()
	}
	<-rs.done
	rs.setStage("stopping the engine (in-process workers, push deliveries, outcome commits, registry row, leadership)")
	_ = rs.eng.Close()
	rs.setStage("closing the database")
	rs.closeDB()
	rs.setStage("done")
}

// awaitPullReports keeps the API serving, until end at the latest, while
// leases this node handed to pull workers are unreported, and logs what it
// waited for.
func (rs *runningServer) awaitPullReports(began, end time.Time) {
	out := rs.eng.PullLeasesOut()
	if out == 0 {
		return
	}
	rs.setStage("taking pull workers' reports")
	rs.log.Info("taking the reports of the leases pull workers hold; leasing no more tasks",
		"leases", out, "up_to", time.Until(end).Round(time.Millisecond))
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	if left := rs.eng.AwaitPullReports(ctx); left > 0 {
		rs.log.Warn("pull leases still unreported: stopping without their reports; their tasks run again when their leases expire",
			"leases", left, "after", time.Since(began).Round(time.Millisecond))
		return
	}
	rs.log.Info("pull workers' leases reported", "after", time.Since(began).Round(time.Millisecond))
}
