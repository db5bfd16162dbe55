// Package postgres is the PostgreSQL backend of retryq's store.Store, built
// on pgx v5 and pgxpool.
//
// Give retryq a database, or a schema (through the URL's search_path), of
// its own, open it and hand the store to retryq.NewClient; close it after
// the client:
//
//	st, err := postgres.Open(ctx, postgres.Config{
//		URL:         "postgres://retryq:secret@db.internal/retryq?sslmode=require",
//		AutoMigrate: true, // or run Migrate (retryq migrate) before the nodes start
//	})
//	if err != nil {
//		return err
//	}
//	defer st.Close()
//	client, err := retryq.NewClient(st, retryq.Options{})
//
// Concurrent nodes share one database: FetchTasks leases with
// FOR UPDATE SKIP LOCKED so fetchers never lease the same task and never wait
// for each other, every transition is a conditional update naming the state
// and lease it expects, and inserts, promotions and releases NOTIFY a
// channel of the deployment's schema ("retryq_wakeup" in the schema public,
// "retryq_wakeup.SCHEMA" in another) so idle nodes wake up early (see
// Store.Wakeups).
//
// Times are stored as timestamptz, which has microsecond precision: every
// time.Time is truncated to the microsecond on the way in (consistently, so
// comparisons against the caller's Now agree with what is stored) and comes
// back in UTC. Payloads, policies and targets are stored as bytea, byte for
// byte. Durations are stored as nanoseconds.
//
// The schema is versioned by embedded migrations (see Migrate); Open does not
// migrate unless Config.AutoMigrate is set.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retryq/retryq/internal/connstr"
	"github.com/retryq/retryq/store"
)

// Defaults applied by Open to zero Config fields.
const (
	DefaultMaxConns        = 10
	DefaultConnectTimeout  = 10 * time.Second
	DefaultReconnectMin    = 100 * time.Millisecond
	DefaultReconnectMax    = 5 * time.Second
	DefaultApplicationName = "retryq"
	// DefaultMigrateLockTimeout is how long a migration waits for a lock
	// on a table it changes when neither Config.MigrateLockTimeout nor
	// the session's lock_timeout sets it.
	DefaultMigrateLockTimeout = 10 * time.Second
)

// publicChannel is the LISTEN/NOTIFY channel of a deployment whose tables
// are in the schema public (see notifyChannelSQL).
const publicChannel = "retryq_wakeup"

// notifyChannelSQL is the SQL expression naming the LISTEN/NOTIFY channel
// of the deployment whose tables are in the session's current schema.
// NOTIFY reaches every session of the database that listens, whatever its
// schema, so deployments in several schemas of one database each need a
// channel of their own: one shared channel woke every deployment for the
// others' work and showed each the others' task and lease ids. Every node
// of a deployment evaluates it with the same search_path, so all agree.
// The channel is:
//
//   - retryq_wakeup for the schema public (what every deployment used
//     before, so nodes on older binaries and newer ones still wake each
//     other in the common case);
//   - retryq_wakeup.SCHEMA for a schema name of at most 49 bytes (the
//     channel then fits PostgreSQL's 63-byte identifier bound whole);
//   - retryq_wakeup#HASH for a longer name, HASH being the first 32 hex
//     digits of the SHA-256 of the name's bytes (a different separator,
//     so no short name's channel is a long name's).
//
// The statements that notify evaluate it on the server (pg_notify takes
// the channel as text, exactly); the listener reads it once per
// connection and LISTENs on it as a quoted identifier (listenConn).
const notifyChannelSQL = `(CASE
	WHEN coalesce(current_schema(), 'public') = 'public' THEN '` + publicChannel + `'
	WHEN octet_length(current_schema()) <= 49 THEN '` + publicChannel + `.' || current_schema()
	ELSE '` + publicChannel + `#' || left(encode(sha256(convert_to(current_schema(), current_setting('server_encoding'))), 'hex'), 32)
END)`

// Config configures Open.
type Config struct {
	// URL is the connection string: a postgres:// URL or key=value DSN as
	// accepted by pgx (for example "postgres://user:pw@host/db?sslmode=require").
	// pgx options such as default_query_exec_mode=exec (for poolers that do
	// not support prepared statements) may be given in it. Required.
	URL string
	// MaxConns is the maximum size of the connection pool (default: the
	// URL's pool_max_conns, else 10). The Wakeups listener uses one extra
	// dedicated connection. The operators' calls (ListTasks, ListDead,
	// DeadSummary, Stats, RedriveDead, PurgeDead) hold at most half of
	// the pool at once (at least one connection).
	MaxConns int32
	// MinConns is the number of connections kept open (default: the URL's
	// pool_min_conns, else 0). Open opens max(MinConns, min(MaxConns,
	// DefaultWarmConns)) connections and prepares the hot statements on
	// each before it returns; connections beyond MinConns
	// close after 30 minutes idle.
	MinConns int32
	// ConnectTimeout bounds establishing one connection (default 10s).
	ConnectTimeout time.Duration
	// PollOnly disables LISTEN/NOTIFY, for transaction-mode poolers
	// (PgBouncer) where a session cannot LISTEN. Nodes then rely on polling.
	//
	// Such a pooler may run each transaction of a client connection on a
	// different server connection, so the store must keep no session state
	// between transactions. Unless the URL sets default_query_exec_mode,
	// PollOnly therefore also makes queries use
	// pgx.QueryExecModeCacheDescribe (only the unnamed prepared statement,
	// as pgx recommends behind PgBouncer) instead of pgx's default, named
	// prepared statements, which a transaction-mode PgBouncer does not
	// support (1.21+ does with max_prepared_statements set). Everything
	// else the store sets or locks is transaction-scoped either way
	// (set_config(..., true), SET TRANSACTION, pg_advisory_xact_lock).
	PollOnly bool
	// AutoMigrate makes Open apply pending migrations. Without it, Open
	// accepts a database whose schema is older than this binary's, or
	// empty, and the store's calls fail with store.ErrUnavailable and
	// store.ErrSchemaBroken until Migrate has run.
	AutoMigrate bool
	// MigrateLockTimeout bounds how long each statement of a migration
	// waits for a lock on a table it changes, held by another session (a
	// long transaction or query) before the migration gives up with
	// ErrMigrationLockTimeout and rolls back. Every statement on that
	// table queues behind a waiting migration's lock, so a migration that
	// waited without bound stalled the nodes with it. Zero takes the
	// session's lock_timeout when set (as in the URL's
	// ?lock_timeout=30s), else DefaultMigrateLockTimeout. The wait for a
	// concurrent migration's advisory lock is not bounded.
	MigrateLockTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff of the
	// Wakeups listener's reconnects (defaults 100ms and 5s).
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// Logger receives listener reconnect messages (nil = discard).
	Logger *slog.Logger
}

// Validate reports the first invalid field, with an error matching
// store.ErrInvalid. Zero fields are valid (Open gives them defaults),
// except URL.
func (c Config) Validate() error {
	if strings.TrimSpace(c.URL) == "" {
		return fmt.Errorf("postgres config: URL is required: %w", store.ErrInvalid)
	}
	if _, err := pgxpool.ParseConfig(c.URL); err != nil {
		return fmt.Errorf("postgres config: URL: %w: %w", store.ErrInvalid, hideConnString(err))
	}
	switch {
	case c.MaxConns < 0:
		return fmt.Errorf("postgres config: MaxConns must not be negative (got %d): %w", c.MaxConns, store.ErrInvalid)
	case c.MinConns < 0:
		return fmt.Errorf("postgres config: MinConns must not be negative (got %d): %w", c.MinConns, store.ErrInvalid)
	case c.MaxConns > 0 && c.MinConns > c.MaxConns:
		return fmt.Errorf("postgres config: MinConns (%d) exceeds MaxConns (%d): %w", c.MinConns, c.MaxConns, store.ErrInvalid)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("postgres config: ConnectTimeout must not be negative: %w", store.ErrInvalid)
	case c.MigrateLockTimeout < 0:
		return fmt.Errorf("postgres config: MigrateLockTimeout must not be negative: %w", store.ErrInvalid)
	case c.ReconnectMin < 0:
		return fmt.Errorf("postgres config: ReconnectMin must not be negative: %w", store.ErrInvalid)
	case c.ReconnectMax < 0:
		return fmt.Errorf("postgres config: ReconnectMax must not be negative: %w", store.ErrInvalid)
	case c.ReconnectMax > 0 && c.ReconnectMin > c.ReconnectMax:
		return fmt.Errorf("postgres config: ReconnectMin exceeds ReconnectMax: %w", store.ErrInvalid)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MinConns > c.MaxConns {
		c.MinConns = c.MaxConns
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.ReconnectMin > c.ReconnectMax {
		c.ReconnectMin = c.ReconnectMax
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Store is a PostgreSQL-backed store.Store and store.Notifier.
type Store struct {
	cfg    Config
	pool   *pgxpool.Pool
	closed atomic.Bool

	// bgCtx is cancelled by Close to stop Wakeups listeners; bgMu orders
	// bgWG.Add in Wakeups before bgWG.Wait in Close.
	bgMu     sync.Mutex
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup

	cancelMu   sync.Mutex
	cancelSubs map[chan store.LeaseRef]struct{} // Cancellations receivers (notify.go)

	// begin starts inTx's transactions, set once by beginQuery
	// (idletx.go); idleTxLimit replaces IdleInTransactionTimeout when
	// positive (tests set it before the first transaction).
	beginOnce   sync.Once
	begin       string
	idleTxLimit time.Duration

	// opSlots holds a token for each operator call running (operatorConns).
	opSlots chan struct{}

	// full holds the disk_full error of the last write that failed so
	// while none has committed since (noteWrite); nil else.
	full atomic.Pointer[error]

	wq          writeQueue   // the group-commit writer's queue (group.go)
	groups      atomic.Int64 // batches sent by the writer
	groupWrites atomic.Int64 // writes in them
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Notifier       = (*Store)(nil)
	_ store.CancelNotifier = (*Store)(nil)
	_ store.GroupCommitter = (*Store)(nil)
	_ store.GroupCounter   = (*Store)(nil)
)

// Open connects to PostgreSQL, checks the schema version (refusing a
// database migrated by a newer binary with store.ErrSchemaTooNew) and, with
// AutoMigrate, applies pending migrations. An invalid cfg or URL is an
// error matching store.ErrInvalid; a server that cannot be reached, one
// matching store.ErrUnavailable. The Store is safe for concurrent use.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	// Pool sizes given in the URL (pool_max_conns, pool_min_conns) apply
	// unless the Config sets them: the server's --db has no other way.
	maxFromURL := cfg.MaxConns == 0 && urlSets(cfg.URL, "pool_max_conns")
	minFromURL := cfg.MinConns == 0 && urlSets(cfg.URL, "pool_min_conns")
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w: %w", store.ErrInvalid, hideConnString(err))
	}
	if maxFromURL {
		cfg.MaxConns = pcfg.MaxConns
	}
	if minFromURL {
		cfg.MinConns = pcfg.MinConns
	}
	cfg = cfg.withDefaults()
	pcfg.MaxConns = cfg.MaxConns
	pcfg.MinConns = cfg.MinConns
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > cfg.ConnectTimeout {
		pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = DefaultApplicationName
	}
	if cfg.PollOnly && !urlSets(cfg.URL, "default_query_exec_mode") {
		pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	// Sessions that refuse writes are not kept (readonly.go).
	pcfg.ConnConfig.Tracer = readOnlyTracer{next: pcfg.ConnConfig.Tracer}
	pcfg.PrepareConn = keepConn
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, translate("open postgres", err)
	}
	s := &Store{cfg: cfg, pool: pool, wq: writeQueue{signal: make(chan struct{}, 1)},
		opSlots: make(chan struct{}, operatorConns(cfg.MaxConns))}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.bgWG.Add(1)
	go s.writer()
	// Reachable is enough: a node may start while the server is read-only
	// (a failover in progress) and become ready when it accepts writes.
	if err := s.reach(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	current := true // the schema is the one this binary knows
	if cfg.AutoMigrate {
		if err := s.Migrate(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("open postgres: %w", err)
		}
	} else {
		applied, known, err := s.SchemaVersion(ctx)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		if applied > known {
			s.Close()
			return nil, fmt.Errorf("open postgres: schema version %d, this binary knows %d: %w", applied, known, store.ErrSchemaTooNew)
		}
		current = applied == known
	}
	if current { // the hot statements need the current schema
		if err := s.warm(ctx, warmConns(cfg), !cfg.PollOnly); err != nil {
			s.Close()
			return nil, fmt.Errorf("open postgres: %w", err)
		}
	}
	return s, nil
}

// hideConnString returns err, the driver's refusal of a connection string,
// quoting that string with its passwords hidden (connstr.Redact). The
// driver masks only the spellings it recognises: a keyword/value
// "password = ..." (spaces around '='), an escaped space in the value or a
// URL password holding '@' showed all or part of the password in the
// error, which ends in the server's log and the CLI's output.
func hideConnString(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	c := *pe
	c.ConnString = connstr.Redact(pe.ConnString)
	return &c
}

// urlSets reports whether connString sets the parameter name (pgx's
// parsers consume their own parameters, so look before they do).
func urlSets(connString, name string) bool {
	c, err := pgconn.ParseConfig(connString)
	if err != nil {
		return false
	}
	_, ok := c.RuntimeParams[name]
	return ok
}

// Pool exposes the underlying connection pool (for tests and tools).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// ErrReadOnly is wrapped (with store.ErrUnavailable) by Ping when the
// server answers but refuses writes.
var ErrReadOnly = errors.New("the server accepts no writes (a read-only session, a standby in recovery, or a primary demoted by a failover)")

// Ping checks the database is reachable and accepts writes: a server whose
// sessions are read-only (default_transaction_read_only, a hot standby, a
// primary demoted by a failover the URL still names) answers every write
// with an error, so it fails with store.ErrUnavailable and ErrReadOnly.
// While the last write failed with disk_full and no insert has committed
// since, it tries one (rolled back), and fails with store.ErrUnavailable
// and store.ErrDiskFull if the server refuses it too (diskfull.go).
func (s *Store) Ping(ctx context.Context) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	if s.closed.Load() {
		return fmt.Errorf("ping: %w", store.ErrClosed)
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return translate("ping", err)
	}
	defer c.Release()
	var readOnly bool
	// transaction_read_only is on in a session whose transactions start
	// read-only, and always on a standby; pg_is_in_recovery covers a
	// standby that a role setting might otherwise hide.
	err = c.QueryRow(ctx,
		"SELECT current_setting('transaction_read_only') = 'on' OR pg_is_in_recovery()").Scan(&readOnly)
	if err != nil {
		return translate("ping", err)
	}
	if readOnly {
		// The session stays read-only even once the server is not: it is
		// closed on release, and the next Ping asks a new one.
		markReadOnly(c.Conn())
		return fmt.Errorf("ping: %w: %w", store.ErrUnavailable, ErrReadOnly)
	}
	// A table dropped or renamed by someone else fails every statement
	// on it. The names are resolved as the statements resolve them
	// (search_path), without locking the tables: a migration or a
	// VACUUM FULL holding one does not stall the check.
	var missing string
	if err := c.QueryRow(ctx, schemaProbe).Scan(&missing); err != nil {
		return translate("ping", err)
	}
	if missing != "" {
		return fmt.Errorf("ping: %w: %w: no table %s in the search_path", store.ErrUnavailable, store.ErrSchemaBroken, missing)
	}
	// Reads work on a full disk; writes do not.
	if s.full.Load() != nil {
		if err := s.probeRoom(ctx, c); err != nil && !errors.Is(err, store.ErrDiskFull) {
			return err
		}
	}
	return s.diskFull()
}

// schemaProbe returns the tables of the schema that the search_path does
// not find, comma-separated; "" when all are there.
const schemaProbe = `SELECT coalesce(string_agg(t, ', '), '') FROM unnest(ARRAY['tasks', 'task_types', 'attempts',
 'nodes', 'leader', 'retention_totals', 'schema_migrations']) AS t WHERE to_regclass(t) IS NULL`

// reach checks the database answers, whether or not it accepts writes.
func (s *Store) reach(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("ping: %w", store.ErrClosed)
	}
	if err := s.pool.Ping(ctx); err != nil {
		return translate("ping", err)
	}
	return nil
}

// Close stops Wakeups listeners and closes the pool. It is idempotent.
func (s *Store) Close() error {
	s.bgMu.Lock()
	already := s.closed.Swap(true)
	s.bgMu.Unlock()
	if already {
		return nil
	}
	s.bgCancel()
	s.bgWG.Wait()
	s.pool.Close()
	return nil
}

// begin checks the store is open; every method calls it first.
func (s *Store) check(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, store.ErrClosed)
	}
	return nil
}

// operatorConns is how many connections of a pool of maxConns the
// operators' calls may hold at once: half of them, at least one. Those
// calls come as many at once as dashboards and scripts send them, and
// some are slow (Stats counts every task; any of them may wait behind a
// lock): with the whole pool theirs, the engine's own calls (the
// leader's renewal, heartbeats, fetches, outcomes) waited for a
// connection until leases and the leadership were lost.
func operatorConns(maxConns int32) int { return max(1, int(maxConns)/2) }

// operatorSlot waits for the turn of an operator call (operatorConns)
// and returns the function that ends it. Callers check their arguments
// first: a call refused with store.ErrInvalid needs no turn.
func (s *Store) operatorSlot(ctx context.Context, op string) (func(), error) {
	select {
	case s.opSlots <- struct{}{}:
		return func() { <-s.opSlots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: wait for a connection: %w", op, ctx.Err())
	}
}

// inTx runs fn in a transaction (READ COMMITTED) and commits it. The
// server ends the transaction's session should it sit idle in it longer
// than IdleInTransactionTimeout (idletx.go). The store's writes avoid
// explicit transactions all the same (single statements and batches, which
// commit without waiting for the client): a write's locks would stall
// other nodes until then.
func (s *Store) inTx(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	if err := s.check(op); err != nil {
		return err
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: s.beginQuery(ctx)}, fn)
	if err != nil {
		return translate(op, err)
	}
	return nil
}

// inBatch sends b in one round trip and runs read on its results. The
// statements of a batch run in one implicit transaction: all commit at
// once, or an error rolls all of them back. The hot paths (insert, fetch,
// outcomes) use it instead of BEGIN ... COMMIT, which costs two more round
// trips per transaction.
func (s *Store) inBatch(ctx context.Context, op string, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	if err := s.check(op); err != nil {
		return err
	}
	br := s.pool.SendBatch(ctx, b)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return translate(op, err)
}

// queueNotify adds a wakeup notification with payload to b (sent when b
// commits): "" for tasks of any type, or duePayload's.
func (s *Store) queueNotify(b *pgx.Batch, payload string) {
	if !s.cfg.PollOnly {
		b.Queue("SELECT pg_notify("+notifyChannelSQL+", $1::text)", payload)
	}
}

// us truncates t to microseconds (timestamptz precision) in UTC.
func us(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Microsecond).UTC()
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := us(t)
	return &u
}

// fromNull maps NULL to the zero time and anything else to UTC.
func fromNull(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
