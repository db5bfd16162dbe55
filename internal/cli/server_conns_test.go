//go:build unix

package cli

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServerMaxConnectionsFlag: --max-connections takes 1 to 1048576 and
// defaults to the smaller of 4096 and half the file descriptor limit;
// anything else is a usage error naming the flag.
func TestServerMaxConnectionsFlag(t *testing.T) {
	clearServerEnv(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	for _, c := range []struct {
		args []string
		want int // 0: refused
	}{
		{args: nil, want: connectionsDefault(openFileLimit())},
		{args: []string{"--max-connections", "3"}, want: 3},
		{args: []string{"--max-connections", "1048576"}, want: 1 << 20},
		{args: []string{"--max-connections", "0"}},
		{args: []string{"--max-connections", "-5"}},
		{args: []string{"--max-connections", "1048577"}},
		{args: []string{"--max-connections", "9223372036854775807"}},
	} {
		var stderr strings.Builder
		env := &Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
		o, st := parseServer(env, append([]string{"--db", db}, c.args...))
		switch {
		case c.want == 0:
			if o != nil || st != exitUsage || !strings.Contains(stderr.String(), "--max-connections: must be between 1 and 1048576") {
				t.Errorf("args %q: status %d, stderr %q; want a usage error naming --max-connections and its range", c.args, st, stderr.String())
			}
		case o == nil:
			t.Errorf("args %q: refused (%d): %s", c.args, st, stderr.String())
		case o.maxConns != c.want:
			t.Errorf("args %q: max connections %d, want %d", c.args, o.maxConns, c.want)
		}
	}
}

// get sends GET path on conn (kept alive) and reads the answer, waiting
// up to limit for it.
func get(conn net.Conn, br *bufio.Reader, path string, limit time.Duration) (int, error) {
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return 0, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(limit))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, err = io.Copy(io.Discard, res.Body)
	return res.StatusCode, err
}

// TestServerMaxConnectionsHoldsTheRestInTheQueue: with --max-connections 3
// and three clients holding kept-alive connections, a fourth client's
// connection is not accepted (it waits in the kernel's queue; its request
// is not answered) until one of the three closes; then it is served.
// There used to be no cap: every client took a file descriptor, up to the
// process's limit, past which the node could open neither database
// connections nor files.
func TestServerMaxConnectionsHoldsTheRestInTheQueue(t *testing.T) {
	clearServerEnv(t)
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	s, err := StartServer(t.Context(), env, []string{"--db", "sqlite:" + filepath.Join(t.TempDir(), "conns.db"),
		"--listen", "127.0.0.1:0", "--max-connections", "3"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	ln := s.rs.listener
	var held []net.Conn
	for i := range 3 {
		c := dialT(t, s.Addr())
		if st, err := get(c, bufio.NewReader(c), "/healthz", waitLimit); err != nil || st != http.StatusOK {
			t.Fatalf("client %d under the cap: %d, %v", i, st, err)
		}
		held = append(held, c)
	}
	if n := ln.accepted.Load(); n != 3 {
		t.Fatalf("accepted %d connections for 3 clients", n)
	}
	fourth := dialT(t, s.Addr()) // the kernel completes the handshake; the server does not accept
	br := bufio.NewReader(fourth)
	if st, err := get(fourth, br, "/healthz", 300*time.Millisecond); err == nil {
		t.Fatalf("the fourth client was answered %d at a cap of 3 connections", st)
	}
	if n := ln.accepted.Load(); n != 3 {
		t.Fatalf("accepted %d connections at a cap of 3", n)
	}
	held[0].Close()
	_ = fourth.SetReadDeadline(time.Now().Add(waitLimit))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the fourth client was not served after a connection closed: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the fourth client: status %d", res.StatusCode)
	}
	if n := ln.accepted.Load(); n != 4 {
		t.Errorf("accepted %d connections, want 4", n)
	}
	// The others are still served on their connections.
	for i, c := range held[1:] {
		if st, err := get(c, bufio.NewReader(c), "/healthz", waitLimit); err != nil || st != http.StatusOK {
			t.Errorf("held client %d after the fourth was served: %d, %v", i+1, st, err)
		}
	}
}
