package storediff_test

import (
	"time"

	"github.com/retryq/retryq/store"
)

// normTask is a task as both backends must report it: times as text (UTC,
// so that a location or monotonic reading cannot differ) and the lease id
// replaced by its backend-independent name (fetch-granted lease ids are
// random).
type normTask struct {
	ID, Type, Payload, State, Key, Lease, Worker, DeadReason string
	Priority, EffectivePrio, Attempt, MaxAttempts            int
	RunAt, Created, Updated, FirstFailure, LeaseExp, Started string
	LastError                                                *store.ErrorInfo
	LastDelay                                                time.Duration
}

func (d *diff) norm(b int, t store.Task) normTask {
	lease := t.LeaseID
	if lease != "" {
		if c, ok := d.canon[b][lease]; ok {
			lease = c
		} else {
			lease = "unknown lease " + lease
		}
	}
	return normTask{ID: t.ID, Type: t.Type, Payload: string(t.Payload), State: string(t.State), Key: t.IdempotencyKey,
		Lease: lease, Worker: t.WorkerID, DeadReason: t.DeadReason,
		Priority: t.Priority, EffectivePrio: t.EffectivePrio, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
		RunAt: stamp(t.RunAt), Created: stamp(t.CreatedAt), Updated: stamp(t.UpdatedAt), FirstFailure: stamp(t.FirstFailureAt),
		LeaseExp: stamp(t.LeaseExpiresAt), Started: stamp(t.StartedAt), LastError: t.LastError, LastDelay: t.LastDelay}
}

func (d *diff) normAll(b int, ts []store.Task) []normTask {
	out := make([]normTask, 0, len(ts))
	for _, t := range ts {
		out = append(out, d.norm(b, t))
	}
	return out
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
