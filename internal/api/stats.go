package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/outage"
	"github.com/retryq/retryq/store"
)

// statsWindow is the window of the attempt-based statistics.
const statsWindow = time.Hour

// nodeAliveAfter: a node whose last heartbeat is older is reported not alive
// (nodes heartbeat every 5s). A node whose role is engine.RoleStopped (it
// closed cleanly) is not alive however recent its last heartbeat.
const nodeAliveAfter = 30 * time.Second

// statsJSON are the statistics of one type or of all types.
type statsJSON struct {
	Type   string              `json:"type,omitempty"`
	Counts map[store.State]int `json:"counts"`
	Total  int                 `json:"total"`
	// DLQSize is the number of dead tasks.
	DLQSize int `json:"dlq_size"`
	// Attempts, Retries and Failures count attempts finished in the window.
	Attempts int `json:"attempts"`
	Retries  int `json:"retries"`
	Failures int `json:"failures"`
	// RetryRate is retries / attempts in the window.
	RetryRate float64 `json:"retry_rate"`
	// MeanRetriesPerTask is retries / first attempts in the window: 0
	// when it holds neither, null when it holds retries of tasks whose
	// first attempts came before it (no ratio to give).
	MeanRetriesPerTask *float64 `json:"mean_retries_per_task"`
	// RetentionDeleted counts the tasks that retention has deleted, by
	// final state, since the database was created (not windowed).
	RetentionDeleted retentionJSON `json:"retention_deleted"`
	firstAttempts    int
}

// retentionJSON counts retention deletions by final state.
type retentionJSON struct {
	Succeeded int `json:"succeeded"`
	Cancelled int `json:"cancelled"`
	Dead      int `json:"dead"`
}

func newStats(typ string) *statsJSON {
	st := &statsJSON{Type: typ, Counts: make(map[store.State]int, len(store.States)), MeanRetriesPerTask: new(float64)}
	for _, s := range store.States {
		st.Counts[s] = 0
	}
	return st
}

func (st *statsJSON) add(ts *store.TypeStats) {
	for s, n := range ts.Counts {
		st.Counts[s] += n
		st.Total += n
	}
	st.DLQSize = st.Counts[store.StateDead]
	st.RetentionDeleted.Succeeded += ts.RetentionDeleted[store.StateSucceeded]
	st.RetentionDeleted.Cancelled += ts.RetentionDeleted[store.StateCancelled]
	st.RetentionDeleted.Dead += ts.RetentionDeleted[store.StateDead]
	st.firstAttempts += ts.FirstAttempts
	st.Retries += ts.Retries
	st.Failures += ts.Failures
	st.Attempts = st.firstAttempts + st.Retries
	if st.Attempts > 0 {
		st.RetryRate = float64(st.Retries) / float64(st.Attempts)
	}
	switch {
	case st.firstAttempts > 0:
		mean := float64(st.Retries) / float64(st.firstAttempts)
		st.MeanRetriesPerTask = &mean
	case st.Retries == 0:
		st.MeanRetriesPerTask = new(float64)
	default:
		st.MeanRetriesPerTask = nil // retries, no first attempt: not 0
	}
}

// stats handles GET /v1/stats. Types are whatever clients enqueue, so the
// answer lists at most ?limit= of them (default 100): the largest by
// total, in name order; overall and type_count cover them all.
func (s *server) stats(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "limit")
	if err != nil {
		return err
	}
	limit, err := q.limit()
	if err != nil {
		return err
	}
	tss, err := s.e.Stats(r.Context(), statsWindow)
	if err != nil {
		return err
	}
	overall := newStats("")
	types := make([]*statsJSON, 0, len(tss))
	for i := range tss {
		st := newStats(tss[i].Type)
		st.add(&tss[i])
		overall.add(&tss[i])
		types = append(types, st)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"window_seconds": statsWindow.Seconds(),
		"overall":        overall,
		"types":          largestTypes(types, limit),
		"type_count":     len(types),
	})
	return nil
}

// largestTypes returns the limit types with the largest totals (ties by
// name), in name order, as the store listed them.
func largestTypes(types []*statsJSON, limit int) []*statsJSON {
	if len(types) <= limit {
		return types
	}
	bySize := slices.Clone(types)
	slices.SortStableFunc(bySize, func(a, b *statsJSON) int {
		if a.Total != b.Total {
			return cmp.Compare(b.Total, a.Total)
		}
		return strings.Compare(a.Type, b.Type)
	})
	keep := bySize[:limit]
	slices.SortFunc(keep, func(a, b *statsJSON) int { return strings.Compare(a.Type, b.Type) })
	return keep
}

// nodeJSON is one registered node.
type nodeJSON struct {
	ID        string   `json:"id"`
	Host      string   `json:"host"`
	Version   string   `json:"version"`
	Role      string   `json:"role"`
	StartedAt jsonTime `json:"started_at"`
	LastSeen  jsonTime `json:"last_seen"`
	Alive     bool     `json:"alive"`
}

// nodes handles GET /v1/nodes: the nodes seen since ?since= (default: the
// last hour).
func (s *server) nodes(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "since")
	if err != nil {
		return err
	}
	// The registry's clock: the database's on PostgreSQL, which every
	// node's heartbeat is written at.
	now := s.e.RegistryNow(r.Context())
	since, err := q.time("since")
	if err != nil {
		return err
	}
	if since.IsZero() {
		since = now.Add(-time.Hour)
	}
	ns, err := s.e.Store().ListNodes(r.Context(), since)
	if err != nil {
		return err
	}
	leader, err := s.e.LeaderNode(r.Context(), now)
	if err != nil {
		return err
	}
	out := make([]nodeJSON, len(ns))
	for i, n := range ns {
		alive := n.Role != engine.RoleStopped && now.Sub(n.LastSeen) < nodeAliveAfter
		out[i] = nodeJSON{ID: n.ID, Host: n.Host, Version: n.Version, Role: shownRole(n, leader),
			StartedAt: jsonTime(n.StartedAt), LastSeen: jsonTime(n.LastSeen), Alive: alive}
	}
	// In microseconds, as every stored time is answered.
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out, "now": jsonTime(now.Truncate(time.Microsecond))})
	return nil
}

// shownRole is the role GET /v1/nodes shows for n when leader holds the
// scheduler lease ("" when no one does). A row's "leader" is believed only
// while its node holds the lease: a leader killed without closing leaves
// its row saying "leader" until it is 30 s old, while another node takes
// the lease after about 12.5 s. Such a row is shown as "standby", so at
// most one node is ever shown as the leader. A node counts itself leader
// for less long than its lease lasts, so a live leader's row loses the
// role before the lease expires; other rows are shown as written.
func shownRole(n store.Node, leader string) string {
	if n.Role == engine.RoleLeader && n.ID != leader {
		return engine.RoleStandby
	}
	return n.Role
}

// healthz handles GET /healthz: the process is up.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz handles GET /readyz: 200 when Config.Ready passes, else 503;
// 503 too once the node began to shut down.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.e.ShuttingDown() {
		// From the first moment of a stop, so that a load balancer sends
		// new work elsewhere while the node still takes its pull
		// workers' reports. The stop is in the server's log already.
		return errStopping
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		// Logged once per outage: a load balancer probes every few seconds.
		// A node that flaps between ready and not is warned about at
		// most once a minute (outage.Tracker).
		now := time.Now()
		switch step, failures, since := s.notReady.Failure(now); step {
		case outage.First:
			s.log.Warn("not ready", "request_id", requestIDFrom(r.Context()), "err", err)
		case outage.Reminder:
			s.log.Warn("not ready", "request_id", requestIDFrom(r.Context()), "failures", failures,
				"for", now.Sub(since).Round(time.Second), "err", err)
		default:
			s.log.Debug("not ready", "request_id", requestIDFrom(r.Context()), "failures", failures, "err", err)
		}
		msg := "not ready: the database is unreachable, refuses writes, is missing tables, or its migrations are not current (see the server log)"
		switch {
		case errors.Is(err, store.ErrDiskFull):
			msg = "not ready: the database's storage is full (disk, quota or file size limit); writes fail until space is freed (see the server log)"
		case errors.Is(err, store.ErrCorrupt):
			msg = "not ready: " + corruptMessage(err)
		}
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: msg}
	}
	if failures, after, logged := s.notReady.Success(time.Now()); failures > 0 {
		level := slog.LevelDebug // not ready again within the minute
		if logged {
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "ready again", "request_id", requestIDFrom(r.Context()),
			"failures", failures, "after", after.Round(time.Millisecond))
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// defaultReady checks that the store answers, accepts writes (Store.Ping)
// and its schema is current.
func (s *server) defaultReady(ctx context.Context) error {
	st := s.e.Store()
	ping := st.Ping(ctx)
	if ping != nil && !errors.Is(ping, store.ErrSchemaBroken) {
		return ping
	}
	applied, known, err := st.SchemaVersion(ctx)
	if err != nil {
		return errors.Join(ping, err)
	}
	switch {
	case applied > known:
		// An upgrade's 'retryq migrate' ran while this node runs.
		return fmt.Errorf("schema version %d is newer than this binary (it knows %d): a newer binary migrated the database; replace this node with it", applied, known)
	case applied < known:
		// Tables missing from an older schema are its migrations' to add.
		return fmt.Errorf("schema version %d is older than this binary (it needs %d): run retryq migrate with this binary", applied, known)
	}
	return ping
}
