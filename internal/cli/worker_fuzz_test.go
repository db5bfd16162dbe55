package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// rawServer answers every request on a loopback port with the bytes its
// answer holds at the time, then closes the connection.
type rawServer struct {
	ln     net.Listener
	answer atomic.Pointer[[]byte]
}

func startRawServer(tb testing.TB) *rawServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &rawServer{ln: ln}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if a := s.answer.Load(); a != nil {
					_, _ = c.Write(*a)
				}
			}()
		}
	}()
	return s
}

// FuzzWorkerLeaseAnswer: whatever a server answers a lease request (its
// status line, Retry-After, body), the worker gets at most the tasks it
// asked for, each with an id and a lease id (printable, as the log prints
// them), or an error that is one line
// of printable text (the worker prints it on the terminal) whose pause
// stays within maxRetryAfter. The answer is sent as raw bytes, so that the
// status line's reason phrase is the server's too.
func FuzzWorkerLeaseAnswer(f *testing.F) {
	task := func(id, lease string) string {
		return fmt.Sprintf(`{"id":%q,"type":"a","payload":{"n":1},"attempt":1,"lease_id":%q}`, id, lease)
	}
	for _, s := range []struct {
		max                      uint8
		status                   uint16
		reason, retryAfter, body string
	}{
		{0, 200, "OK", "", `{"tasks":[` + task("t_1", "l_1") + `]}`},
		{1, 200, "OK", "", `{"tasks":[]}`},
		{0, 200, "OK", "", `{"tasks":[` + task("t_1", "l_1") + `,` + task("t_2", "l_2") + `]}`},
		{0, 200, "OK", "", `{"tasks":[{"id":"t_\u001b[2J","type":"a","attempt":1,"lease_id":"l_1"}]}`},
		{1, 200, "OK", "", `{"tasks":[` + task("", "") + `]}`},
		{1, 200, "OK", "", `{"tasks":null}`},
		{1, 200, "OK", "", `[1,2]`},
		{1, 503, "Service Unavailable", "5", `{"error":{"code":"unavailable","message":"db down","request_id":"r1"}}`},
		{1, 429, "Too Many", "999999999", `{"error":{"code":"overloaded","message":"\u001b[31mslow"}}`},
		{1, 502, "Bad \x1b]0;pwned\x07Gateway", "", "<html><title>Bad\ngateway</title></html>"},
		{1, 401, "Unauthorized", "-1", `{"error":{"message":"no token"}}`},
		{1, 200, "OK", "", "\xff\xfe"},
	} {
		f.Add(s.max, s.status, s.reason, s.retryAfter, []byte(s.body))
	}
	srv := startRawServer(f)
	w := &pullWorker{o: &workerOptions{id: "fuzz", types: []string{"a"}, lease: time.Minute},
		c: newAPIClient("http://"+srv.ln.Addr().String(), "")}
	f.Fuzz(func(t *testing.T, max uint8, status uint16, reason, retryAfter string, body []byte) {
		n := 1 + int(max)%100
		head := fmt.Sprintf("HTTP/1.1 %03d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n",
			int(status)%1000, reason, len(body))
		if retryAfter != "" {
			head += "Retry-After: " + retryAfter + "\r\n"
		}
		answer := append([]byte(head+"\r\n"), body...)
		srv.answer.Store(&answer)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tasks, err := w.lease(ctx, n)
		if err == nil {
			if len(tasks) > n {
				t.Fatalf("asked for %d tasks, got %d", n, len(tasks))
			}
			for _, tk := range tasks {
				if tk.ID == "" || tk.LeaseID == "" {
					t.Fatalf("a task without an id or a lease id: %+v", tk)
				}
				if strings.ContainsFunc(tk.ID+tk.Type+tk.LeaseID, unprintable) {
					t.Fatalf("a task whose id, type or lease id the log would print raw: %+v", tk)
				}
			}
			return
		}
		msg := err.Error()
		if !utf8.ValidString(msg) || strings.ContainsFunc(msg, unprintable) {
			t.Fatalf("error %q is not printable text", msg)
		}
		var ae *apiCallError
		if errors.As(err, &ae) && (ae.RetryAfter < 0 || ae.RetryAfter > maxRetryAfter) {
			t.Fatalf("Retry-After %q gave a pause of %v", retryAfter, ae.RetryAfter)
		}
	})
}
