package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgBouncer starts a PgBouncer in transaction pool mode in front of the
// server of upstreamURL (for example a URL from URL) and returns the URL of
// upstreamURL's database through it. The bouncer is stopped when t ends.
//
// settings are extra "key = value" lines for the [pgbouncer] section that
// override the defaults, for example "default_pool_size = 2" (the default
// pool size is 5 server connections per database).
//
// The test is skipped when no pgbouncer binary is found (on PATH or as
// /usr/sbin/pgbouncer), unless CI=true, where it fails.
func PgBouncer(t testing.TB, upstreamURL string, settings ...string) string {
	t.Helper()
	b := NewBouncer(t, upstreamURL, settings...)
	return b.URL(upstreamURL)
}

// Bouncer is a PgBouncer process started by NewBouncer.
type Bouncer struct {
	port     int
	user     string
	password string
	dir      string
	cmd      *exec.Cmd
	watcher  *os.Process   // the watchdog of cmd
	exited   chan struct{} // closed when cmd has exited
	waitErr  error         // cmd.Wait's error, set before exited is closed
}

// NewBouncer starts a PgBouncer in transaction pool mode listening on a
// free 127.0.0.1 port, forwarding every database name to the server of
// upstreamURL (as the user of upstreamURL), and stops it when t ends. See
// PgBouncer for settings and for when it skips.
func NewBouncer(t testing.TB, upstreamURL string, settings ...string) *Bouncer {
	t.Helper()
	bin := findPgBouncer()
	if bin == "" {
		const hint = "pgbouncer not found (on PATH or /usr/sbin/pgbouncer): install it (apt-get install pgbouncer) to run this test"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: not skipping)", hint)
		}
		t.Skip(hint)
	}
	up, err := pgconn.ParseConfig(upstreamURL)
	if err != nil {
		t.Fatalf("pgtest: pgbouncer: parse upstream URL: %v", err)
	}
	as, err := programAccount("pgbouncer")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// A directory of our own rather than t.TempDir: when running as root it
	// must be reachable by the postgres user, and t.TempDir's parent is not.
	dir, err := os.MkdirTemp("", "retryq-pgbouncer-")
	if err != nil {
		t.Fatalf("pgtest: pgbouncer: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := as.chown(dir); err != nil {
		t.Fatalf("pgtest: pgbouncer: %v", err)
	}
	b := &Bouncer{user: up.User, password: up.Password, dir: dir}
	// With auth_type=trust clients are not asked for a password, but the
	// user must be listed in auth_file; its password there is the one
	// PgBouncer uses to log in to the server.
	if err := os.WriteFile(filepath.Join(dir, "users.txt"),
		[]byte(quoteUserlist(up.User)+" "+quoteUserlist(up.Password)+"\n"), 0o644); err != nil {
		t.Fatalf("pgtest: pgbouncer: %v", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ {
		b.port, err = freePort()
		if err != nil {
			t.Fatalf("pgtest: pgbouncer: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(b.config(up, settings)), 0o644); err != nil {
			t.Fatalf("pgtest: pgbouncer: %v", err)
		}
		lastErr = b.start(bin, as, b.URL(upstreamURL))
		if lastErr == nil {
			break
		}
		b.stop()
		if !errors.Is(lastErr, errExited) {
			break // a port taken meanwhile is the only reason to retry
		}
	}
	if lastErr != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		t.Fatalf("pgtest: start pgbouncer: %v\n%s", lastErr, tail(log, 2000))
	}
	t.Cleanup(b.stop)
	return b
}

// Port is the TCP port the bouncer listens on (127.0.0.1).
func (b *Bouncer) Port() int { return b.port }

// URL returns the URL of the database of dbURL (a URL of the bouncer's
// upstream server) through the bouncer.
func (b *Bouncer) URL(dbURL string) string {
	db := "postgres"
	if c, err := pgconn.ParseConfig(dbURL); err == nil && c.Database != "" {
		db = c.Database
	}
	u := url.URL{
		Scheme:   "postgres",
		Host:     "127.0.0.1:" + strconv.Itoa(b.port),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	if b.password != "" {
		u.User = url.UserPassword(b.user, b.password)
	} else {
		u.User = url.User(b.user)
	}
	return u.String()
}

func findPgBouncer() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/sbin/pgbouncer"); err == nil && !fi.IsDir() {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

func (b *Bouncer) config(up *pgconn.Config, settings []string) string {
	set := map[string]string{
		"listen_addr":       "127.0.0.1",
		"listen_port":       strconv.Itoa(b.port),
		"unix_socket_dir":   "", // no socket: the port may be reused by another bouncer
		"auth_type":         "trust",
		"auth_file":         filepath.Join(b.dir, "users.txt"),
		"pool_mode":         "transaction",
		"default_pool_size": "5",
		"max_client_conn":   "500",
		// Clients such as psql and lib/pq send it; PgBouncer rejects
		// unknown startup parameters.
		"ignore_startup_parameters": "extra_float_digits",
		"log_connections":           "0",
		"log_disconnections":        "0",
		// Server connections are killed when a test database is dropped;
		// do not make the next client wait 15s before reconnecting.
		"server_login_retry": "1",
	}
	if up.TLSConfig != nil {
		// The upstream URL allows or requires TLS (sslmode other than
		// disable); PgBouncer's default is plain TCP.
		set["server_tls_sslmode"] = "prefer"
	}
	for _, s := range settings {
		k, v, _ := strings.Cut(s, "=")
		set[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	// "*" forwards any database name to the same-named database upstream.
	fmt.Fprintf(&sb, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", up.Host, up.Port)
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s = %s\n", k, set[k])
	}
	return sb.String()
}

// quoteUserlist quotes s for a PgBouncer auth_file.
func quoteUserlist(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

var errExited = errors.New("pgbouncer exited")

// start runs pgbouncer in the foreground and waits until clientURL accepts
// connections.
func (b *Bouncer) start(bin string, as *account, clientURL string) error {
	log, err := os.OpenFile(filepath.Join(b.dir, "pgbouncer.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	if err := as.chown(log.Name()); err != nil {
		return err
	}
	cmd := exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = log, log
	for _, kv := range os.Environ() {
		// Not a systemd service (the Debian build supports socket activation).
		if !strings.HasPrefix(kv, "LISTEN_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	as.prepare(cmd, false)
	if err := cmd.Start(); err != nil {
		return err
	}
	b.cmd = cmd
	exited := make(chan struct{})
	b.exited = exited
	go func() {
		b.waitErr = cmd.Wait()
		close(exited)
	}()
	b.startWatchdog(as)

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = ping(ctx, clientURL)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("%w: %w", errExited, b.waitErr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer on port %d not accepting connections after 30s: %w", b.port, err)
		}
		select {
		case <-b.exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// startWatchdog starts a shell that stops pgbouncer if this process dies
// without running its cleanup (as for the clusters, see startWatchdog).
func (b *Bouncer) startWatchdog(as *account) {
	script := `while [ -d "/proc/$1" ] || kill -0 "$1" 2>/dev/null; do sleep 1; done; ` +
		`kill -TERM "$2" 2>/dev/null; rm -rf "$3"`
	cmd := exec.Command("/bin/sh", "-c", script, "pgtest-pgbouncer-watchdog",
		strconv.Itoa(os.Getpid()), strconv.Itoa(b.cmd.Process.Pid), b.dir)
	as.prepare(cmd, true)
	if err := cmd.Start(); err == nil {
		b.watcher = cmd.Process
		go func() { _ = cmd.Wait() }()
	}
}

// stop stops pgbouncer (immediate shutdown) and waits for it to exit.
func (b *Bouncer) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	if b.watcher != nil {
		_ = b.watcher.Kill()
		b.watcher = nil
	}
	b.cmd = nil
}
