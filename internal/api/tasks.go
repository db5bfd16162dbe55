package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// MaxAPIBatch caps the tasks of one POST /v1/tasks/batch.
const MaxAPIBatch = 1000

// taskJSON is the wire form of a task.
type taskJSON struct {
	ID             string           `json:"id"`
	Type           string           `json:"type"`
	Payload        json.RawMessage  `json:"payload"`
	State          store.State      `json:"state"`
	Priority       int              `json:"priority"`
	Attempt        int              `json:"attempt"`
	MaxAttempts    int              `json:"max_attempts"`
	IdempotencyKey string           `json:"idempotency_key,omitempty"`
	RunAt          jsonTime         `json:"run_at"`
	CreatedAt      jsonTime         `json:"created_at"`
	UpdatedAt      jsonTime         `json:"updated_at"`
	LastError      *store.ErrorInfo `json:"last_error"`
	DeadReason     string           `json:"dead_reason,omitempty"`
	Duplicate      bool             `json:"duplicate,omitempty"`
	Attempts       *[]attemptJSON   `json:"attempts,omitempty"`
}

// attemptJSON is one row of a task's history.
type attemptJSON struct {
	Number       int              `json:"number"`
	WorkerID     string           `json:"worker_id"`
	StartedAt    jsonTime         `json:"started_at"`
	FinishedAt   jsonTime         `json:"finished_at"`
	Outcome      string           `json:"outcome"`
	Error        *store.ErrorInfo `json:"error"`
	DelaySeconds float64          `json:"delay_seconds"`
	Detail       string           `json:"detail"`
}

// taskView renders tasks. It resolves each task's effective max_attempts
// (the task's own, else its type's policy), caching types per request.
type taskView struct {
	ctx context.Context
	e   *engine.Engine
	max map[string]int
}

func (s *server) view(ctx context.Context) *taskView {
	return &taskView{ctx: ctx, e: s.e, max: make(map[string]int)}
}

func (v *taskView) maxAttempts(t *store.Task) int {
	if t.MaxAttempts > 0 {
		return t.MaxAttempts
	}
	m, ok := v.max[t.Type]
	if !ok {
		if spec, err := v.e.TypeSpec(v.ctx, t.Type); err == nil {
			m = spec.Policy.MaxAttempts
		}
		v.max[t.Type] = m
	}
	return m
}

func (v *taskView) task(t *store.Task) taskJSON {
	payload := t.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	return taskJSON{
		ID: t.ID, Type: t.Type, Payload: payload, State: t.State, Priority: t.Priority,
		Attempt: t.Attempt, MaxAttempts: v.maxAttempts(t), IdempotencyKey: t.IdempotencyKey,
		RunAt: jsonTime(t.RunAt), CreatedAt: jsonTime(t.CreatedAt), UpdatedAt: jsonTime(t.UpdatedAt),
		LastError: t.LastError, DeadReason: t.DeadReason,
	}
}

func (v *taskView) tasks(ts []store.Task) []taskJSON {
	out := make([]taskJSON, len(ts))
	for i := range ts {
		out[i] = v.task(&ts[i])
	}
	return out
}

func attemptsJSON(as []store.Attempt) []attemptJSON {
	out := make([]attemptJSON, len(as))
	for i, a := range as {
		out[i] = attemptJSON{
			Number: a.Number, WorkerID: a.WorkerID, StartedAt: jsonTime(a.StartedAt), FinishedAt: jsonTime(a.FinishedAt),
			Outcome: a.Outcome, Error: a.Error, DelaySeconds: durSeconds(a.Delay), Detail: a.Detail,
		}
	}
	return out
}

// enqueueBody is the body of POST /v1/tasks and one element of a batch.
type enqueueBody struct {
	Type           string          `json:"type"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey text            `json:"idempotency_key"`
	Priority       *int            `json:"priority"`
	DelaySeconds   *float64        `json:"delay_seconds"`
	RunAt          *string         `json:"run_at"`
	MaxAttempts    int             `json:"max_attempts"`
}

// request converts the body into an engine request; prefix names the
// element in a batch ("tasks[3].").
func (b *enqueueBody) request(prefix string) (engine.EnqueueRequest, error) {
	// The engine checks the payload and stores it compacted.
	r := engine.EnqueueRequest{Type: b.Type, Payload: b.Payload, Priority: b.Priority, MaxAttempts: b.MaxAttempts,
		IdempotencyKey: string(b.IdempotencyKey)}
	var err error
	if r.Delay, err = optSeconds(prefix+"delay_seconds", b.DelaySeconds, maxDelay); err != nil {
		return r, err
	}
	if b.RunAt != nil {
		if b.DelaySeconds != nil {
			return r, fieldError(prefix+"run_at", "cannot be combined with delay_seconds")
		}
		if r.RunAt, err = parseTime(prefix+"run_at", *b.RunAt); err != nil {
			return r, err
		}
	}
	return r, nil
}

// enqueue handles POST /v1/tasks.
func (s *server) enqueue(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	var b enqueueBody
	if err := s.readBody(w, r, &b, false); err != nil {
		return err
	}
	req, err := b.request("")
	if err != nil {
		return err
	}
	res, err := s.e.Enqueue(r.Context(), req)
	if err != nil {
		return err
	}
	out := s.view(r.Context()).task(&res.Task)
	status := http.StatusCreated
	if res.Duplicate {
		out.Duplicate, status = true, http.StatusOK
	}
	writeJSON(w, status, out)
	return nil
}

// batchBody is the body of POST /v1/tasks/batch.
type batchBody struct {
	Tasks []json.RawMessage `json:"tasks"`
}

// enqueueBatch handles POST /v1/tasks/batch: all tasks or none.
func (s *server) enqueueBatch(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	var b batchBody
	if err := s.readBody(w, r, &b, false); err != nil {
		return err
	}
	if len(b.Tasks) == 0 || len(b.Tasks) > MaxAPIBatch {
		return fieldError("tasks", "must hold between 1 and %d tasks (got %d)", MaxAPIBatch, len(b.Tasks))
	}
	reqs := make([]engine.EnqueueRequest, len(b.Tasks))
	for i, raw := range b.Tasks {
		prefix := fmt.Sprintf("tasks[%d].", i)
		var eb enqueueBody
		if err := decodeJSON(raw, &eb, prefix); err != nil {
			return err
		}
		req, err := eb.request(prefix)
		if err != nil {
			return err
		}
		reqs[i] = req
	}
	res, err := s.e.EnqueueMany(r.Context(), reqs)
	if err != nil {
		return err
	}
	v := s.view(r.Context())
	out := make([]taskJSON, len(res))
	for i := range res {
		out[i] = v.task(&res[i].Task)
		out[i].Duplicate = res[i].Duplicate
	}
	writeJSON(w, http.StatusCreated, map[string]any{"tasks": out})
	return nil
}

// getTask handles GET /v1/tasks/{id}: the task with its attempt history.
func (s *server) getTask(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, as, err := s.taskWithHistory(r.Context(), id)
	if err != nil {
		return err
	}
	out := s.view(r.Context()).task(&t)
	hist := attemptsJSON(as)
	out.Attempts = &hist
	writeJSON(w, http.StatusOK, out)
	return nil
}

// maxHistoryReads bounds how often taskWithHistory reads the history.
const maxHistoryReads = 4

// taskWithHistory reads a task and its history as of one moment. They are
// two reads, and an outcome committed between them would pair the task as
// it was with the history as it is (a running task whose attempt is
// already recorded as failed, say). So the task is read again after its
// history: every change that writes history also moves the task's state,
// attempt, lease or update time, so an unchanged task means the history
// read belongs to it. A task that keeps changing is answered after a few
// tries with its latest reads.
func (s *server) taskWithHistory(ctx context.Context, id string) (store.Task, []store.Attempt, error) {
	t, err := s.e.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return t, nil, taskNotFound(id)
	} else if err != nil {
		return t, nil, err
	}
	for i := 0; ; i++ {
		as, err := s.e.Attempts(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return t, nil, taskNotFound(id) // deleted in between
		} else if err != nil {
			return t, nil, err
		}
		again, err := s.e.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return t, nil, taskNotFound(id)
		} else if err != nil {
			return t, nil, err
		}
		if sameVersion(&t, &again) || i+1 >= maxHistoryReads {
			return again, as, nil
		}
		t = again
	}
}

// sameVersion reports whether two reads of a task found it unchanged, as
// far as its history is concerned (a heartbeat moves only the lease expiry).
func sameVersion(a, b *store.Task) bool {
	return a.State == b.State && a.Attempt == b.Attempt && a.LeaseID == b.LeaseID && a.UpdatedAt.Equal(b.UpdatedAt)
}

// taskPage is a page of tasks.
type taskPage struct {
	Tasks      []taskJSON `json:"tasks"`
	NextCursor *string    `json:"next_cursor"`
}

func (s *server) page(ctx context.Context, ts []store.Task, next string) taskPage {
	p := taskPage{Tasks: s.view(ctx).tasks(ts)}
	if next != "" {
		p.NextCursor = &next
	}
	return p
}

// listTasks handles GET /v1/tasks.
func (s *server) listTasks(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "type", "state", "limit", "cursor")
	if err != nil {
		return err
	}
	var p store.ListParams
	if p.Type, err = q.typ(); err != nil {
		return err
	}
	if p.States, err = q.states(); err != nil {
		return err
	}
	if p.Limit, err = q.limit(); err != nil {
		return err
	}
	if p.Cursor, err = q.cursor(); err != nil {
		return err
	}
	ts, next, err := s.e.List(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.page(r.Context(), ts, next))
	return nil
}

// actionBody is the (optional, empty) body of cancel and retry.
type actionBody struct{}

// cancelTask handles POST /v1/tasks/{id}/cancel.
func (s *server) cancelTask(w http.ResponseWriter, r *http.Request) error {
	return s.taskAction(w, r, s.e.Cancel)
}

// retryTask handles POST /v1/tasks/{id}/retry.
func (s *server) retryTask(w http.ResponseWriter, r *http.Request) error {
	return s.taskAction(w, r, s.e.Retry)
}

func (s *server) taskAction(w http.ResponseWriter, r *http.Request, op func(context.Context, string) (store.Task, error)) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var b actionBody
	if err := s.readBody(w, r, &b, true); err != nil {
		return err
	}
	t, err := op(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return taskNotFound(id)
	} else if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.view(r.Context()).task(&t))
	return nil
}
