// Package pgtest provides throwaway PostgreSQL databases for tests.
//
// The server comes from, in order:
//
//  1. the environment variable RETRYQ_TEST_POSTGRES_URL, an admin URL of a
//     running server on which per-test databases are created, or
//  2. a private cluster started once per test binary (initdb + pg_ctl in a
//     temporary directory, listening on a free 127.0.0.1 port), using the
//     PostgreSQL binaries in RETRYQ_TEST_POSTGRES_BIN, on PATH or under
//     /usr/lib/postgresql/*/bin (newest version first). When the
//     process runs as root the cluster runs as the "postgres" system user,
//     because initdb refuses to run as root.
//
// Without either, tests skip with a hint - unless CI=true, where they fail.
//
// Each call to URL creates a fresh database that is dropped when the test
// ends, so tests using it can run in parallel. Packages should call Main from
// TestMain so that the shared cluster is stopped when the tests finish; a
// watchdog process stops it anyway if the test binary dies without cleaning
// up.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/internal/freeport"
)

// EnvURL names the environment variable holding an admin URL of an existing
// server to create test databases on.
const EnvURL = "RETRYQ_TEST_POSTGRES_URL"

const skipHint = "PostgreSQL not available: install postgresql or set " + EnvURL + "=postgres://... to run these tests"

var (
	sharedOnce    sync.Once
	sharedCluster *Cluster
	sharedErr     error
)

// Main runs the tests and then stops the shared cluster (if one was started)
// before exiting. Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		stopAll()
		signal.Reset(s.(syscall.Signal))
		os.Exit(1)
	}()
	code := m.Run()
	signal.Stop(sigs)
	stopAll()
	os.Exit(code)
}

// URL returns the connection URL of a new, empty database that is dropped
// when t's test ends. It skips (or, with CI=true, fails) the test when no
// PostgreSQL is available.
func URL(t testing.TB) string {
	t.Helper()
	if admin := os.Getenv(EnvURL); admin != "" {
		return newDatabase(t, admin)
	}
	sharedOnce.Do(func() {
		sharedCluster, sharedErr = startCluster()
	})
	if sharedErr != nil {
		unavailable(t, sharedErr)
	}
	return sharedCluster.NewDatabase(t)
}

// NewDatabase is an alias of URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return URL(t)
}

// NewCluster starts a private cluster for t, stopped and removed when t ends.
// Use it for tests that stop or restart the server, so that they do not
// disturb other tests. It ignores RETRYQ_TEST_POSTGRES_URL (a remote server
// cannot be restarted) and skips when no local binaries are available.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster()
	if errors.Is(err, errNoBinaries) && os.Getenv(EnvURL) != "" {
		t.Skip("this test stops the server: it needs local PostgreSQL binaries (initdb, pg_ctl), " + EnvURL + " is not enough")
	}
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errNoBinaries) && os.Getenv("CI") != "true" {
		t.Skip(skipHint)
	}
	if errors.Is(err, errNoBinaries) {
		t.Fatalf("%s (CI=true: not skipping)", skipHint)
	}
	t.Fatalf("pgtest: start PostgreSQL: %v", err)
}

var errNoBinaries = errors.New("initdb/pg_ctl not found")

// Cluster is a PostgreSQL cluster run from a temporary directory.
type Cluster struct {
	bin     string // directory of initdb, pg_ctl, postgres
	dir     string // temporary directory (data, socket, log)
	port    int
	as      *account // nil when running as this process's user
	watcher *os.Process

	mu      sync.Mutex
	running bool
	closed  bool
}

var (
	allMu       sync.Mutex
	allClusters = map[*Cluster]bool{}
)

func stopAll() {
	allMu.Lock()
	cs := make([]*Cluster, 0, len(allClusters))
	for c := range allClusters {
		cs = append(cs, c)
	}
	allMu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// EnvBin names the environment variable that may point at the directory
// holding initdb and pg_ctl (it then takes precedence over PATH and
// /usr/lib/postgresql/*/bin).
const EnvBin = "RETRYQ_TEST_POSTGRES_BIN"

// findBinaries returns the directory holding initdb and pg_ctl.
func findBinaries() (string, error) {
	if dir := os.Getenv(EnvBin); dir != "" {
		for _, b := range []string{"initdb", "pg_ctl"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return "", fmt.Errorf("%w in %s=%s", errNoBinaries, EnvBin, dir)
			}
		}
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Prefer the newest major version.
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", errNoBinaries
}

func majorOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func startCluster() (*Cluster, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin}
	if c.as, err = programAccount("initdb"); err != nil {
		return nil, err
	}
	c.dir, err = os.MkdirTemp("", "retryq-pgtest-")
	if err != nil {
		return nil, err
	}
	if err := c.as.chown(c.dir); err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	// initdb --no-sync only skips initdb's own final flush; the server keeps
	// fsync at its default (on).
	if out, err := c.command("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(c.dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	for try := 0; ; try++ {
		c.port, err = freePort()
		if err == nil {
			err = c.Start()
		}
		if err == nil {
			break
		}
		if try == 2 {
			os.RemoveAll(c.dir)
			return nil, err
		}
	}
	c.startWatchdog()
	allMu.Lock()
	allClusters[c] = true
	allMu.Unlock()
	return c, nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	c.as.prepare(cmd, false)
	return cmd
}

// startWatchdog starts a shell that stops the cluster and removes its
// directory once this process is gone, for test binaries that die without
// running their cleanup (timeouts, SIGKILL).
func (c *Cluster) startWatchdog() {
	// kill -0 fails with EPERM for a root parent seen from the postgres
	// user, so look at /proc first.
	script := `while [ -d "/proc/$1" ] || kill -0 "$1" 2>/dev/null; do sleep 1; done; ` +
		`"$2/pg_ctl" -D "$3/data" -m immediate -w stop >/dev/null 2>&1; rm -rf "$3"`
	cmd := exec.Command("/bin/sh", "-c", script, "pgtest-watchdog",
		strconv.Itoa(os.Getpid()), c.bin, c.dir)
	c.as.prepare(cmd, true)
	if err := cmd.Start(); err == nil {
		c.watcher = cmd.Process
		go func() { _ = cmd.Wait() }()
	}
}

// freePort returns a free 127.0.0.1 port outside the kernel's ephemeral
// range where there is one (freeport.Port): Restart and Stop/Start bring
// the server back on the same port, which a connection made meanwhile
// (the stores under test keep dialling it) could have taken from the range.
func freePort() (int, error) {
	return freeport.Port()
}

// Start starts a stopped cluster on its port.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgtest: cluster closed")
	}
	if c.running {
		return nil
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300", c.port, c.dir)
	out, err := c.command("pg_ctl", "-D", c.dataDir(), "-l", filepath.Join(c.dir, "server.log"),
		"-w", "-t", "60", "-o", opts, "start").CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pg_ctl start: %w: %s\n%s", err, out, tail(log, 2000))
	}
	c.running = true
	return nil
}

// Stop stops the cluster (fast shutdown: open connections are terminated).
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked()
}

func (c *Cluster) stopLocked() error {
	if !c.running {
		return nil
	}
	out, err := c.command("pg_ctl", "-D", c.dataDir(), "-m", "fast", "-w", "-t", "60", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	c.running = false
	return nil
}

// Restart stops and starts the cluster on the same port.
func (c *Cluster) Restart() error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.Start()
}

// Close stops the cluster and removes its directory.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.stopLocked()
	if c.watcher != nil {
		_ = c.watcher.Kill()
	}
	_ = os.RemoveAll(c.dir)
	allMu.Lock()
	delete(allClusters, c)
	allMu.Unlock()
	return err
}

// AdminURL is the URL of the cluster's "postgres" database as superuser.
func (c *Cluster) AdminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port is the TCP port the cluster listens on (kept across restarts).
func (c *Cluster) Port() int { return c.port }

// NewDatabase creates a fresh database on the cluster, dropped when t ends,
// and returns its URL.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, c.AdminURL())
}

func newDatabase(t testing.TB, adminURL string) string {
	t.Helper()
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := adminExec(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := adminExec(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		if err != nil {
			// Best effort: the server may have been stopped by the test.
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns the admin URL (URL or keyword/value form) pointing at
// database name.
func withDatabase(adminURL, name string) (string, error) {
	if strings.HasPrefix(adminURL, "postgres://") || strings.HasPrefix(adminURL, "postgresql://") {
		u, err := url.Parse(adminURL)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", EnvURL, err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	return adminURL + " dbname=" + name, nil
}

// dbName derives a unique, valid database name from a test name.
func dbName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	var rnd [5]byte
	_, _ = rand.Read(rnd[:])
	return "rq_" + b.String() + "_" + hex.EncodeToString(rnd[:])
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
