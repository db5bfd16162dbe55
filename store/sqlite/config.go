package sqlite

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

// Config configures a SQLite store. The zero value of every field except
// Path selects a default.
type Config struct {
	// Path is the database file. It is created if missing. In-memory
	// databases are not supported: the writer and the readers are separate
	// connections and must share one file.
	Path string
	// Synchronous is PRAGMA synchronous: OFF, NORMAL, FULL or EXTRA.
	// Default FULL: a committed batch survives a power loss.
	Synchronous string
	// BusyTimeout is how long a connection waits for a lock held by another
	// process before failing with store.ErrUnavailable. Default 5s.
	// SQLite counts it in whole milliseconds: it is rounded up, and
	// bounded to 2^31-1 ms (about 24.8 days).
	BusyTimeout time.Duration
	// MaxReaders is the size of the read-only connection pool. Default 4.
	MaxReaders int
	// CacheSizeKiB is the page cache of each connection. Default 32768
	// (32 MiB).
	CacheSizeKiB int
}

// walSizeLimit is the size the WAL file is cut back to when it starts over
// after a checkpoint (PRAGMA journal_size_limit): well above its size in
// normal use (checkpoints run every 1,000 pages, about 4 MiB), so it is cut
// only after a long read let it grow.
const walSizeLimit = 64 << 20

// Defaults.
const (
	DefaultSynchronous  = "FULL"
	DefaultBusyTimeout  = 5 * time.Second
	DefaultMaxReaders   = 4
	DefaultCacheSizeKiB = 32 << 10
)

func (c Config) withDefaults() Config {
	if c.Synchronous == "" {
		c.Synchronous = DefaultSynchronous
	}
	c.Synchronous = strings.ToUpper(c.Synchronous)
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.MaxReaders == 0 {
		c.MaxReaders = DefaultMaxReaders
	}
	if c.CacheSizeKiB == 0 {
		c.CacheSizeKiB = DefaultCacheSizeKiB
	}
	return c
}

// Validate reports the first invalid field. Zero fields are valid (they
// select defaults), except Path. Errors match store.ErrInvalid.
func (c Config) Validate() error {
	switch {
	case c.Path == "":
		return fmt.Errorf("sqlite config: Path: %w: must not be empty", store.ErrInvalid)
	case strings.Contains(c.Path, ":memory:") || strings.Contains(c.Path, "mode=memory"):
		return fmt.Errorf("sqlite config: Path: %w: in-memory databases are not supported", store.ErrInvalid)
	case strings.HasPrefix(c.Path, "file:"):
		// The store adds its own URI parameters to the path; a URI given
		// here would be taken apart or opened as something else.
		return fmt.Errorf("sqlite config: Path: %w: want a file path, not a %q URI", store.ErrInvalid, "file:")
	case strings.ContainsAny(c.Path, "?#"):
		return fmt.Errorf("sqlite config: Path: %w: must not contain '?' or '#': %q", store.ErrInvalid, c.Path)
	}
	switch strings.ToUpper(c.Synchronous) {
	case "", "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return fmt.Errorf("sqlite config: Synchronous: %w: want OFF, NORMAL, FULL or EXTRA, got %q", store.ErrInvalid, c.Synchronous)
	}
	if c.BusyTimeout < 0 {
		return fmt.Errorf("sqlite config: BusyTimeout: %w: must not be negative, got %s", store.ErrInvalid, c.BusyTimeout)
	}
	if c.MaxReaders < 0 {
		return fmt.Errorf("sqlite config: MaxReaders: %w: must not be negative, got %d", store.ErrInvalid, c.MaxReaders)
	}
	if c.CacheSizeKiB < 0 {
		return fmt.Errorf("sqlite config: CacheSizeKiB: %w: must not be negative, got %d", store.ErrInvalid, c.CacheSizeKiB)
	}
	return nil
}

// busyMillis converts a (positive) busy timeout to SQLite's busy_timeout:
// whole milliseconds, rounded up, and at most the int32 SQLite reads. Both
// 0 (a timeout under a millisecond truncated) and a value past int32 (which
// SQLite reads as 0) would turn off waiting for another process's lock.
func busyMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(min(ms, math.MaxInt32))
}

// dsn builds the modernc.org/sqlite data source name of one connection.
func (c Config) dsn(writer bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busyMillis(c.BusyTimeout), 10)+")")
	q.Add("_pragma", "cache_size(-"+strconv.Itoa(c.CacheSizeKiB)+")")
	q.Add("_pragma", "temp_store(MEMORY)")
	// Ephemeral tables (UPDATE ... FROM (VALUES ...), sorters) take their
	// page cache from the temp schema, and tearing one down walks its whole
	// cache: a small temp cache keeps every batched statement cheap (bulk
	// throughput went from ~10k to ~18k tasks/s) while main keeps its own.
	q.Add("_pragma", "temp.cache_size(-1024)")
	if writer {
		// journal_mode(WAL) is set by Open (setWAL), which waits for
		// another process's lock: as a connection pragma it would fail at
		// once.
		q.Add("_pragma", "synchronous("+c.Synchronous+")")
		// While a long read (a backup, an operator's session) holds its
		// snapshot, checkpoints cannot pass it and the WAL grows with every
		// write; without a limit the file kept that peak size until the
		// store closed. With one, the WAL is cut back to it when it starts
		// over after the read.
		q.Add("_pragma", "journal_size_limit("+strconv.Itoa(walSizeLimit)+")")
		// Take the write lock at BEGIN: a read-then-write transaction never
		// has to upgrade its lock (and fail with SQLITE_BUSY) half-way.
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return c.Path + "?" + q.Encode()
}
