package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

// insertTasksSQL inserts the rows of insertRows.args, skipping those whose
// idempotency key is taken; it returns the inserted tasks.
const insertTasksSQL = insertRowsSQL + `
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING ` + taskCols

// insertRowsSQL inserts rows without idempotency keys: each is inserted
// exactly as given, so the store builds the tasks itself (insertRows.task)
// instead of reading them back. Without an ON CONFLICT clause each row is a
// plain insert rather than a speculative one (which costs an extra WAL
// record and index probe per row).
const insertRowsSQL = `
INSERT INTO tasks AS t (id, type, payload, priority, effective_prio, state, max_attempts,
	idempotency_key, run_at, created_at, updated_at, attempt, lease_id, lease_expires_at, worker_id, started_at)
SELECT i.id, i.type, i.payload, i.priority, i.priority, i.state, i.max_attempts,
	i.key, i.run_at, i.now, i.now, i.attempt, i.lease_id, i.lease_exp, i.worker_id,
	CASE WHEN i.lease_id IS NULL THEN NULL::timestamptz ELSE i.now END
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int[], $5::text[], $6::int[],
	$7::text[], $8::timestamptz[], $9::int[], $10::timestamptz[], $11::int[], $12::text[], $13::timestamptz[], $14::text[])
	AS i(id, type, payload, priority, state, max_attempts, key, run_at, ord, now, attempt, lease_id, lease_exp, worker_id)
ORDER BY i.ord`

// maxValuesRows bounds the inserts sent as a VALUES list (insertValuesSQL);
// larger batches go as arrays (insertRowsSQL).
const maxValuesRows = 16

// insertValuesSQL[n] inserts n rows without idempotency keys, like
// insertRowsSQL, from a VALUES list of scalar parameters (14 per row). The
// server decodes scalars faster than it unpacks 14 arrays into rows: for
// a group of 8 enqueues in the stream benchmark, the statement took 116 µs
// instead of 145 µs (pg_stat_statements). Each size is its own prepared
// statement.
var insertValuesSQL = func() [maxValuesRows + 1]string {
	var out [maxValuesRows + 1]string
	for n := 1; n <= maxValuesRows; n++ {
		var b strings.Builder
		b.WriteString(`INSERT INTO tasks (id, type, payload, priority, effective_prio, state, max_attempts,
	idempotency_key, run_at, created_at, updated_at, attempt, lease_id, lease_expires_at, worker_id, started_at) VALUES `)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			p := i * valuesParams
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
				p+1, p+2, p+3, p+4, p+4, p+5, p+6, p+7, p+8, p+9, p+9, p+10, p+11, p+12, p+13, p+14)
		}
		out[n] = b.String()
	}
	return out
}()

// valuesParams is the number of parameters per row of insertValuesSQL.
const valuesParams = 14

// InsertTasks inserts a batch in one multi-row statement. Idempotency keys
// are resolved with ON CONFLICT DO NOTHING on the unique partial index,
// then the existing tasks are read (insertKeyed).
func (s *Store) InsertTasks(ctx context.Context, p store.InsertParams) ([]store.InsertResult, error) {
	const op = "insert tasks"
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(p.Tasks) == 0 {
		return []store.InsertResult{}, nil
	}
	now := us(p.Now)
	n := len(p.Tasks)
	var (
		r          = make(insertRows, 0, n)
		firstByKey = map[string]int{} // idempotency key -> first input index
		dupOf      = make([]int, n)   // input index -> earlier index with the same key, or -1
	)
	if err := store.CheckNewTasks(p.Tasks); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := store.CheckInsertLeases(p); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for i := range p.Tasks {
		nt := &p.Tasks[i]
		dupOf[i] = -1
		if nt.IdempotencyKey != "" {
			if j, ok := firstByKey[nt.IdempotencyKey]; ok {
				dupOf[i] = j
				continue
			}
			firstByKey[nt.IdempotencyKey] = i
		}
		runAt := nt.RunAt
		if runAt.IsZero() {
			runAt = p.Now
		}
		row := insertRow{id: nt.ID, typ: nt.Type, payload: nt.Payload, prio: int32(nt.Priority), max: int32(nt.MaxAttempts),
			state: string(store.StatePending), runAt: us(runAt), now: now}
		if runAt.After(p.Now) {
			row.state = string(store.StateScheduled)
		}
		if nt.IdempotencyKey != "" {
			row.key = &nt.IdempotencyKey
		}
		if nt.Lease != nil && row.state == string(store.StatePending) {
			row.state, row.attempt = string(store.StateRunning), 1
			row.leaseID, row.worker = &nt.Lease.LeaseID, nt.Lease.WorkerID
			row.leaseExp = us(p.Now.Add(nt.Lease.Duration))
		}
		r = append(r, row)
	}
	if len(firstByKey) == 0 {
		return s.insertBatch(ctx, op, p.Tasks, r)
	}
	return s.insertKeyed(ctx, op, p.Tasks, dupOf, r)
}

// insertRow is one task row as the insert statements store it.
type insertRow struct {
	id, typ, state     string
	payload            []byte
	prio, max, attempt int32
	key                *string // nil: no idempotency key
	runAt, now         time.Time
	leaseID            *string // nil: not leased at insert
	worker             string
	leaseExp           time.Time // when leaseID is set
}

// insertRows are the rows of one write, in input order. One slice of
// structs rather than one slice per column: a single enqueue, the common
// case, then costs one allocation instead of fourteen.
type insertRows []insertRow

// args are the parameters of insertTasksSQL and insertRowsSQL: one array
// per column, and each row's position as its ord.
func (r insertRows) args() []any {
	n := len(r)
	var (
		ids, types, states, workers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads                    = make([][]byte, n)
		prios, maxes, ords, atts    = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		keys, leaseIDs              = make([]*string, n), make([]*string, n)
		runAts, nows                = make([]time.Time, n), make([]time.Time, n)
		leaseExps                   = make([]*time.Time, n)
	)
	for i := range r {
		row := &r[i]
		ids[i], types[i], states[i], workers[i] = row.id, row.typ, row.state, row.worker
		payloads[i] = row.payload
		prios[i], maxes[i], ords[i], atts[i] = row.prio, row.max, int32(i), row.attempt
		keys[i], leaseIDs[i] = row.key, row.leaseID
		runAts[i], nows[i] = row.runAt, row.now
		if row.leaseID != nil {
			leaseExps[i] = &row.leaseExp
		}
	}
	return []any{ids, types, payloads, prios, states, maxes, keys, runAts, ords, nows, atts, leaseIDs, leaseExps, workers}
}

// insertStatement returns one INSERT for the rows of parts (rows in all,
// no idempotency keys) and its parameters: insertValuesSQL for up to
// maxValuesRows rows, built straight from the parts, else insertRowsSQL
// over the parts merged.
func insertStatement(parts []insertRows, rows int) (string, []any) {
	if rows == 0 || rows > maxValuesRows {
		all := make(insertRows, 0, rows)
		for _, p := range parts {
			all = append(all, p...)
		}
		return insertRowsSQL, all.args()
	}
	args := make([]any, 0, rows*valuesParams)
	for _, r := range parts {
		for i := range r {
			row := &r[i]
			var leaseExp, started *time.Time
			if row.leaseID != nil {
				leaseExp, started = &row.leaseExp, &row.now
			}
			args = append(args, row.id, row.typ, row.payload, row.prio, row.state, row.max, row.key,
				row.runAt, row.now, row.attempt, row.leaseID, leaseExp, row.worker, started)
		}
	}
	return insertValuesSQL[rows], args
}

// task is the row as stored and read back by scanTask.
func (row *insertRow) task() store.Task {
	t := store.Task{
		ID: row.id, Type: row.typ, Priority: int(row.prio), EffectivePrio: int(row.prio),
		State: store.State(row.state), Attempt: int(row.attempt), MaxAttempts: int(row.max),
		RunAt: row.runAt, CreatedAt: row.now, UpdatedAt: row.now, WorkerID: row.worker,
	}
	if row.payload != nil {
		t.Payload = row.payload
	}
	if row.key != nil {
		t.IdempotencyKey = *row.key
	}
	if row.leaseID != nil {
		t.LeaseID, t.StartedAt, t.LeaseExpiresAt = *row.leaseID, row.now, row.leaseExp
	}
	return t
}

// wake reports whether inserting r should wake other nodes: for tasks they
// could fetch now, and the leader's scheduler for scheduled ones; tasks
// leased at insert are already running and need nobody.
func (r insertRows) wake() bool {
	return slices.ContainsFunc(r, func(row insertRow) bool { return row.state != string(store.StateRunning) })
}

// insertBatch inserts tasks without idempotency keys, in a group commit
// (group.go) that merges concurrent inserts into one statement.
func (s *Store) insertBatch(ctx context.Context, op string, tasks []store.NewTask, r insertRows) ([]store.InsertResult, error) {
	// Without keys every task becomes exactly one row, in order; the writer
	// checks the row count and hands back the tasks as stored.
	results := make([]store.InsertResult, len(tasks))
	err := s.groupWrite(ctx, op, &groupWrite{ins: r, got: func(ts []store.Task) {
		for i := range ts {
			results[i] = store.InsertResult{Task: ts[i]}
		}
	}})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// insertKeyedSQL is insertTasksSQL that also sends a wake-up (sent at
// commit) when it inserts a task that is not running: only inserted tasks
// wake anyone, a batch of duplicates adds nothing to fetch. Its payload,
// $15, is duePayload's for the batch. The cross join
// with the one-row count makes the statement evaluate woke; its count is
// not read.
const insertKeyedSQL = `
WITH ins AS (` + insertRowsSQL + `
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING t.*
), woke AS MATERIALIZED (
	SELECT pg_notify(` + notifyChannelSQL + `, $15::text) WHERE EXISTS (SELECT 1 FROM ins WHERE ins.state <> 'running')
)
SELECT ` + taskCols + ` FROM ins AS t, (SELECT count(*) FROM woke) AS w`

// maxKeyedRounds bounds the rounds of insertKeyed: a key whose task
// retention deleted between the insert and the read-back is inserted again
// in the next round, where it cannot vanish again (the task it finds, if
// any, is new and unfinished).
const maxKeyedRounds = 3

// insertKeyed inserts a batch holding idempotency keys: ON CONFLICT DO
// NOTHING on the unique partial index, then the tasks that hold the keys
// already are read.
//
// The insert is one statement, committed on its own, and the read another:
// in an explicit transaction, a node whose network path is cut (or whose
// process is stopped) before the COMMIT would leave its session idle in
// it, its uncommitted rows holding their keys, and every other insert of
// those keys would wait until the server noticed the dead peer (hours).
// Should a key's task vanish between the two (retention deleted it), the
// key is free: its task is inserted in another round.
func (s *Store) insertKeyed(ctx context.Context, op string, tasks []store.NewTask, dupOf []int, r insertRows) ([]store.InsertResult, error) {
	if err := s.check(op); err != nil {
		return nil, err
	}
	results := make([]store.InsertResult, len(tasks))
	// Insert the rows in key order: two batches holding the same keys in
	// different orders would otherwise each wait, on the unique key index,
	// for a key the other inserted first, and deadlock. Results are matched
	// by id and key below, so the order is free.
	slices.SortStableFunc(r, func(a, b insertRow) int {
		switch {
		case a.key == nil || b.key == nil:
			return cmpBool(a.key == nil, b.key == nil)
		default:
			return strings.Compare(*a.key, *b.key)
		}
	})
	// Input indexes of the tasks that are not repeats of an earlier key.
	byID := make(map[string]int, len(tasks))
	byKey := make(map[string]int, len(tasks))
	for i, nt := range tasks {
		if dupOf[i] < 0 {
			byID[nt.ID] = i
			if nt.IdempotencyKey != "" {
				byKey[nt.IdempotencyKey] = i
			}
		}
	}
	// Once the first insert has committed, the batch is stored: its
	// caller must be told what was stored, not that its insert failed, so
	// the statements after it no longer end with the caller's ctx (a
	// caller retrying a batch it was told failed would enqueue its keyless
	// tasks twice). They end after committedTimeout, or when the store
	// closes, instead.
	var settled context.Context
	stop := func() {}
	defer func() { stop() }()
	settle := func() context.Context {
		if settled == nil {
			var cancel context.CancelFunc
			settled, cancel = context.WithTimeout(context.WithoutCancel(ctx), committedTimeout)
			unwatch := context.AfterFunc(s.bgCtx, cancel)
			stop = func() { unwatch(); cancel() }
		}
		return settled
	}
	for round := 1; len(r) > 0; round++ {
		insCtx := ctx
		if round > 1 {
			insCtx = settle()
		}
		inserted, vanished, err := s.insertKeyedRound(insCtx, settle, tasks, byID, byKey, r, results)
		if err != nil {
			return nil, s.noted(translate(op, err))
		}
		s.noteInsert(int64(inserted), nil)
		if len(vanished) == 0 {
			break
		}
		if round == maxKeyedRounds {
			return nil, fmt.Errorf("%s: task with idempotency key %q vanished %d times: %w", op, vanished[0], round, store.ErrUnavailable)
		}
		// The rows of the vanished keys, whose tasks were not inserted.
		gone := make(map[string]bool, len(vanished))
		for _, key := range vanished {
			gone[key] = true
		}
		again := make(insertRows, 0, len(vanished))
		for _, row := range r {
			if row.key != nil && gone[*row.key] {
				again = append(again, row)
			}
		}
		r = again
	}
	for i := range tasks {
		if j := dupOf[i]; j >= 0 {
			results[i] = store.InsertResult{Task: results[j].Task, Duplicate: true}
		}
	}
	return results, nil
}

// committedTimeout bounds the statements of a keyed insert after its first
// insert committed (see insertKeyed), which its caller's ctx no longer
// ends: one indexed read, and rarely another insert, which wait only for a
// lock held over the whole table (a migration) or a lost connection.
const committedTimeout = 30 * time.Second

// insertKeyedRound inserts r with ctx and fills in the results of its
// tasks (byID and byKey map their ids and keys to input indexes):
// inserted, or duplicates of the tasks that hold their keys, read with the
// context settle returns once the insert committed. It returns how many
// rows the insert inserted and the keys whose tasks it found neither
// inserted nor existing.
func (s *Store) insertKeyedRound(ctx context.Context, settle func() context.Context, tasks []store.NewTask, byID, byKey map[string]int, r insertRows, results []store.InsertResult) (int, []string, error) {
	sql, args := insertKeyedSQL, r.args()
	if s.cfg.PollOnly {
		sql = insertTasksSQL
	} else {
		args = append(args, duePayload(r))
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return 0, nil, err
	}
	inserted, err := collectTasks(rows)
	if err != nil {
		return 0, nil, err
	}
	done := make(map[string]bool, len(inserted))
	for _, t := range inserted {
		if i, ok := byID[t.ID]; ok && t.IdempotencyKey == tasks[i].IdempotencyKey {
			results[i] = store.InsertResult{Task: t}
			done[t.ID] = true
		}
	}
	// Keyed tasks that were not inserted already exist.
	var missingKeys []string
	for _, row := range r {
		if !done[row.id] && row.key != nil { // only a keyed row can conflict
			missingKeys = append(missingKeys, *row.key)
		}
	}
	if len(missingKeys) == 0 {
		return len(inserted), nil, nil
	}
	rows, err = s.pool.Query(settle(), "SELECT "+taskCols+" FROM tasks t WHERE t.idempotency_key = ANY($1)", missingKeys)
	if err != nil {
		return 0, nil, err
	}
	existing, err := collectTasks(rows)
	if err != nil {
		return 0, nil, err
	}
	holders := make(map[string]store.Task, len(existing))
	for _, t := range existing {
		holders[t.IdempotencyKey] = t
	}
	var vanished []string
	for _, key := range missingKeys {
		t, ok := holders[key]
		if !ok {
			vanished = append(vanished, key) // deleted since the insert found it
			continue
		}
		results[byKey[key]] = store.InsertResult{Task: t, Duplicate: true}
	}
	return len(inserted), vanished, nil
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}
