// Package sqlite implements store.Store on SQLite with the pure-Go driver
// modernc.org/sqlite (no cgo).
//
// Open creates the database file when it is missing and migrates it; hand
// the store to retryq.NewClient and close it after the client:
//
//	st, err := sqlite.Open(ctx, sqlite.Config{Path: "/var/lib/myapp/retryq.db"})
//	if err != nil {
//		return err
//	}
//	defer st.Close()
//	client, err := retryq.NewClient(st, retryq.Options{})
//
// All writes go through one dedicated connection (a *sql.DB limited to one
// open connection), so writers queue in Go instead of spinning on
// SQLITE_BUSY; pure reads use a separate pool of read-only connections that
// WAL mode lets run concurrently with the writer. Write transactions start
// with BEGIN IMMEDIATE.
//
// Timestamps are stored as INTEGER unix microseconds (the precision of
// PostgreSQL timestamptz, so both backends round-trip the same values),
// durations as INTEGER nanoseconds, JSON documents as BLOBs byte-for-byte.
// The schema is created and upgraded by the embedded migrations in
// migrations/.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/retryq/retryq/store"
)

// ErrReadOnly is returned (wrapped, with store.ErrUnavailable) when the
// database file may not be written: Open refuses such a file.
var ErrReadOnly = errors.New("database is read-only")

// ErrFileReplaced is returned (wrapped, with store.ErrUnavailable) when the
// database file or its WAL was deleted, renamed or replaced while the store
// had it open. SQLite goes on writing to the file it opened, which no one
// will find at the path again: every write since would be lost at the next
// start. Ping and every write fail with it until the server is restarted
// on the file now at the path.
var ErrFileReplaced = errors.New("database file deleted or replaced while open; restart the server")

// ErrDiskFull is store.ErrDiskFull. It is returned (wrapped, with
// store.ErrUnavailable) by a write that failed for lack of space: with
// SQLITE_FULL (the disk is full), or with an I/O error while one of the
// database's files is at the process's file size limit (RLIMIT_FSIZE; the
// write failed with EFBIG) or its file system has no space left. Ping
// fails with it while the most recent write transaction failed so and no
// insert of tasks has committed since: every enqueue would fail until
// space is freed. Smaller writes (a heartbeat, an outcome) may commit
// meanwhile in the room the WAL has; they do not end it. Ping itself tries
// an enqueue-sized write then (a task row inserted and deleted in one
// transaction), so readiness returns once space is freed.
var ErrDiskFull = store.ErrDiskFull

// Store is a SQLite-backed store.Store. It is safe for concurrent use.
type Store struct {
	cfg    Config
	files  [2]string      // the database file and its WAL as SQLite names them (Ping)
	opens  [2]os.FileInfo // those files as Open found them; nil when absent (sameFiles)
	opened int            // the schema version Open found, before migrating
	w      *sql.DB        // exactly one connection: every write goes through it
	r      *sql.DB        // read-only pool
	closed atomic.Bool
	// full holds the SQLITE_FULL error of the most recent write
	// transaction while no insert (nor Ping's probe of one) has
	// committed since (noteWrite); nil else.
	full atomic.Pointer[error]
	// busy holds the SQLITE_BUSY error of the most recent write
	// transaction (another process held the write lock past the busy
	// timeout) while none has committed since (noteWrite); nil else.
	busy atomic.Pointer[error]
	// corrupt holds the first error that found the database file damaged
	// or not a database (store.ErrCorrupt; see Store.translate); nil else.
	// Ping fails with it until the store is closed.
	corrupt atomic.Pointer[error]

	writeCh       chan *writeReq
	submitting    atomic.Int64 // submits between their closed check and their send (group.go)
	groups        atomic.Int64 // transactions committed by the writer
	groupWrites   atomic.Int64 // writes in them
	queuedAtReply int          // writer goroutine only: see group.go
	stopWriter    chan struct{}
	writerDone    chan struct{}

	stmtMu    sync.Mutex
	stmts     map[string]*sql.Stmt // prepared on w, by key
	toPrepare map[string]string    // key -> query, to prepare after the current transaction
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.GroupCommitter = (*Store)(nil)
	_ store.GroupCounter   = (*Store)(nil)
)

// Open opens (creating if needed) the database at cfg.Path, applies pending
// migrations and returns the store. It refuses an invalid cfg with an error
// matching store.ErrInvalid, a file it may not write with ErrReadOnly, a
// database whose schema is newer than this binary with store.ErrSchemaTooNew,
// and one whose schema_migrations table another tool wrote with
// store.ErrForeignSchema.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := store.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := createFile(cfg.Path); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", cfg.Path, err)
	}
	w, err := sql.Open("sqlite", cfg.dsn(true))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", cfg.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &Store{cfg: cfg, w: w, stmts: make(map[string]*sql.Stmt)}
	if err := s.refuseForeign(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if err := s.setWAL(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	s.files = sqliteFiles(cfg.Path)
	for i, p := range s.files {
		if fi, err := os.Stat(p); err == nil {
			s.opens[i] = fi
		}
	}
	r, err := sql.Open("sqlite", cfg.dsn(false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", cfg.Path, err)
	}
	r.SetMaxOpenConns(cfg.MaxReaders)
	r.SetMaxIdleConns(cfg.MaxReaders)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	s.r = r
	s.writeCh = make(chan *writeReq, 4*maxGroup)
	s.stopWriter = make(chan struct{})
	s.writerDone = make(chan struct{})
	go s.writer()
	if err := r.PingContext(ctx); err != nil {
		s.Close()
		return nil, translate("open sqlite "+cfg.Path, err)
	}
	return s, nil
}

// createFile creates the database file, when there is none yet, readable
// and writable by its owner only: it holds every task's payload, which
// often carries customer data or credentials, and SQLite would create it
// readable by every local user (0644 under the usual umask). SQLite gives
// the WAL and shared-memory files the database file's mode. A missing
// directory is named in the error; SQLite would only say "unable to open
// database file".
func createFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case errors.Is(err, fs.ErrExist):
		return nil // opened as it is
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist: %w", filepath.Dir(name), err)
	}
	return err
}

// sqliteFiles returns the database file at path and its WAL as SQLite
// names them: absolute, as SQLite makes a relative path when it opens it
// (the process may change its working directory later), and with every
// symbolic link resolved, as SQLite follows a link to the database and
// keeps the WAL next to its target. The file exists: SQLite has opened it
// (through a link whose target did not exist yet, it created it).
func sqliteFiles(path string) [2]string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return [2]string{path, path + "-wal"}
}

// setWAL puts the database in WAL mode, which lasts in the file: only a
// new file (or one another tool created) still needs the switch. The switch
// takes an exclusive lock from within a read, and SQLite does not call the
// busy handler for such an upgrade: while another process holds a lock (it
// is creating the same new file), the pragma fails at once with
// SQLITE_BUSY. So it is retried here until BusyTimeout has passed, as any
// other lock is waited for.
func (s *Store) setWAL(ctx context.Context) error {
	const op = "set sqlite journal mode"
	deadline := time.Now().Add(s.cfg.BusyTimeout)
	pause := time.Millisecond
	for {
		var mode string
		err := s.w.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				// The switch can be refused without an error, for one
				// by a file that may not be written.
				return fmt.Errorf("%s: the database stays in journal mode %q, want wal", op, mode)
			}
			return nil
		}
		left := time.Until(deadline)
		if !isBusy(err) || left <= 0 {
			return s.translate(op, err)
		}
		t := time.NewTimer(min(pause, left)) // the last try comes at the deadline
		select {
		case <-ctx.Done():
			t.Stop()
			return s.translate(op, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// isFull reports whether err is SQLITE_FULL (any extended code).
func isFull(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}

// isIOErr reports whether err is SQLITE_IOERR (any extended code).
func isIOErr(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_IOERR
}

// isBusy reports whether err is SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := store.CheckContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	if err := s.check("ping sqlite"); err != nil {
		return err
	}
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return s.translate("ping sqlite", err)
	}
	// A table dropped or renamed by someone else fails every statement
	// on it; naming each table costs the parse of one statement.
	if err := s.r.QueryRowContext(ctx, schemaProbe).Scan(&one); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s.translate("ping sqlite", err)
	}
	// A damaged file stays damaged: restoring it means a restart.
	if c := s.corrupt.Load(); c != nil {
		return fmt.Errorf("ping sqlite: %w", *c)
	}
	// Reads still work on a full file system; writes do not. While the
	// last write refused for space is not followed by an insert that
	// committed, Ping tries one itself: a node that is not ready is sent
	// no enqueue that could end it.
	if full := s.full.Load(); full != nil {
		if err := s.probeRoom(ctx); err != nil && !errors.Is(err, ErrDiskFull) {
			return err
		}
		if full := s.full.Load(); full != nil {
			return fmt.Errorf("ping sqlite: no enqueue-sized write has committed since one failed: %w", *full)
		}
	}
	// Reads also work while another process holds the write lock.
	if busy := s.busy.Load(); busy != nil {
		return fmt.Errorf("ping sqlite: no write has committed since one waited out the busy timeout: %w", *busy)
	}
	// A file that answers reads may still refuse writes: its file system
	// was remounted read-only (as Linux does after I/O errors), or its
	// permissions changed. Every enqueue and outcome would then fail, so
	// the store is not ready. The database file and its WAL are written.
	if err := s.sameFiles(); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	for _, p := range s.files {
		if err := writable(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ping sqlite: %w: %w: %s: %w", store.ErrUnavailable, ErrReadOnly, p, err)
		}
	}
	return nil
}

// schemaProbe names every table of the schema and reads no row.
const schemaProbe = `SELECT 1 FROM tasks, task_types, attempts, nodes, leader_leases, retention_totals, schema_migrations LIMIT 0`

// sameFiles returns an error matching store.ErrUnavailable and
// ErrFileReplaced when the database file or its WAL at their paths are no
// longer the files Open found there (deleted, renamed away, or replaced,
// say by a backup restored by copying a file over it). SQLite keeps
// writing to the files it has open, so writes would answer success and
// be gone at the next start; a second server opening the path would not
// see them either. A WAL that did not exist at Open is not checked.
func (s *Store) sameFiles() error {
	for i, p := range s.files {
		if s.opens[i] == nil {
			continue
		}
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %w: %s was deleted or renamed", store.ErrUnavailable, ErrFileReplaced, p)
		}
		if err != nil {
			continue // judged by the access check and the statements
		}
		if !os.SameFile(s.opens[i], fi) {
			return fmt.Errorf("%w: %w: %s is another file than the one opened", store.ErrUnavailable, ErrFileReplaced, p)
		}
	}
	return nil
}

// Close implements store.Store. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.stopWriter != nil {
		close(s.stopWriter)
		<-s.writerDone
	}
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite: %w", err)
	}
	return nil
}

// check returns ErrClosed after Close.
func (s *Store) check(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, store.ErrClosed)
	}
	return nil
}

// Statements of the writer connection are prepared once and cached. The
// writer *sql.DB has a single connection, which a running transaction holds:
// preparing on the DB from inside a transaction would wait for it forever.
// So a statement missing from the cache is prepared on the transaction (for
// this use only) and queued; write prepares the queue on the DB once the
// transaction is over.

// txStmt returns query prepared on the writer connection, bound to tx.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	return s.txStmtKey(ctx, tx, query, func() string { return query })
}

// txStmtKey is txStmt for generated queries: key names the query and build
// is called only when it is not cached.
func (s *Store) txStmtKey(ctx context.Context, tx *sql.Tx, key string, build func() string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	if s.stmts == nil {
		s.stmtMu.Unlock()
		return nil, store.ErrClosed
	}
	st, ok := s.stmts[key]
	s.stmtMu.Unlock()
	if ok {
		return tx.StmtContext(ctx, st), nil
	}
	q := build()
	s.stmtMu.Lock()
	if s.toPrepare == nil {
		s.toPrepare = make(map[string]string)
	}
	s.toPrepare[key] = q
	s.stmtMu.Unlock()
	return tx.PrepareContext(ctx, q)
}

// prepareQueued prepares the statements queued by txStmtKey. It must not be
// called inside a transaction.
func (s *Store) prepareQueued(ctx context.Context) {
	s.stmtMu.Lock()
	queue := s.toPrepare
	s.toPrepare = nil
	s.stmtMu.Unlock()
	for key, q := range queue {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			continue // prepared again on next use
		}
		s.stmtMu.Lock()
		if _, dup := s.stmts[key]; dup || s.stmts == nil {
			st.Close()
		} else {
			s.stmts[key] = st
		}
		s.stmtMu.Unlock()
	}
}

// maxVars bounds the parameters of one generated statement, well under
// SQLite's limit (32766), and maxRows the rows of one multi-row statement.
const (
	maxVars   = 16000
	maxRows   = 512
	exactRows = 32 // batches up to this size get a statement of their own size
)

// chunks splits n rows of cols columns into statement sizes: up to
// exactRows rows, one statement of exactly n; beyond, full chunks of the
// largest power of two allowed, then the remainder as powers of two, so
// that a bounded set of prepared statements per query serves every size.
func chunks(n, cols int) []int {
	per := maxRows
	for per*cols > maxVars {
		per /= 2
	}
	if n > 0 && n <= exactRows && n <= per {
		// Small batches (the common case under group commit) run as one
		// statement of their exact size: each statement has a fixed cost
		// that several power-of-two pieces would pay several times.
		return []int{n}
	}
	var out []int
	for n > 0 {
		for per > n {
			per /= 2
		}
		out = append(out, per)
		n -= per
	}
	return out
}

// insertRows inserts len(args)/cols rows with multi-row INSERT statements
// "head VALUES (...),(...)".
func (s *Store) insertRows(ctx context.Context, tx *sql.Tx, head string, cols int, args []any) error {
	for _, n := range chunks(len(args)/cols, cols) {
		st, err := s.txStmtKey(ctx, tx, head+"#"+strconv.Itoa(n), func() string {
			return head + " VALUES " + placeholders(n, cols)
		})
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, args[:n*cols]...); err != nil {
			return err
		}
		args = args[n*cols:]
	}
	return nil
}

// translate maps native errors to the store sentinels and adds op as
// context ("verb noun: %w").
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{store.ErrNotFound, store.ErrLeaseLost, store.ErrConflict, store.ErrSchemaTooNew,
		store.ErrForeignSchema, store.ErrClosed, store.ErrUnavailable, store.ErrInvalid, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	}
	if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "sql: database is closed") {
		return fmt.Errorf("%s: %w: %w", op, store.ErrClosed, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOMEM:
			return fmt.Errorf("%s: %w: %w", op, store.ErrUnavailable, err)
		case sqlite3.SQLITE_FULL:
			return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, ErrDiskFull, err)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB: // Store.translate names the file
			return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, store.ErrCorrupt, err)
		case sqlite3.SQLITE_READONLY:
			return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, ErrReadOnly, err)
		case sqlite3.SQLITE_CONSTRAINT:
			return fmt.Errorf("%s: %w: %w", op, store.ErrConflict, err)
		case sqlite3.SQLITE_ERROR:
			// SQLite has no code of its own for a missing table or
			// column: a table dropped or renamed under the store.
			if msg := se.Error(); strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column") {
				return fmt.Errorf("%s: %w: %w: %w", op, store.ErrUnavailable, store.ErrSchemaBroken, err)
			}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Time and value conversion helpers.

// ts converts a time to unix microseconds; the zero time is NULL.
func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// tsNotNull converts a time to unix microseconds. The zero time (year 1)
// becomes its own microsecond count, which fromMicros reads back as the
// zero time, and which sorts before every other time: 0 is the Unix epoch,
// a time like any other.
func tsNotNull(t time.Time) int64 {
	return t.UnixMicro()
}

func fromTS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromMicros(n.Int64)
}

// fromMicros converts unix microseconds to a UTC time; the microseconds of
// the zero time give exactly the zero time.
func fromMicros(n int64) time.Time {
	return time.UnixMicro(n).UTC()
}

// blob converts a JSON document to a BLOB parameter (nil = NULL).
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// placeholders returns "(?,?,?),(?,?,?)" for rows rows of cols columns.
func placeholders(rows, cols int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	return strings.TrimSuffix(strings.Repeat(one+",", rows), ",")
}

// inList returns "?,?,?" for n values.
func inList(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}
