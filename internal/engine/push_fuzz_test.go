package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// FuzzPushResponse: whatever a push target answers (its status line,
// Retry-After, Location and body, sent as raw bytes), a delivery ends with
// a result that Decide can take: a status of three digits from 100 on, or
// a transport error; a Retry-After that is not negative; a history detail
// of bounded, storable text; and a failure whose code, message and class
// say what happened (for a status, its number).
func FuzzPushResponse(f *testing.F) {
	for _, s := range []struct {
		status                       uint16
		reason, retryAfter, location string
		body                         string
	}{
		{200, "OK", "", "", `{"ok":true}`},
		{503, "Service Unavailable", "120", "", "busy"},
		{429, "Too Many Requests", "Wed, 21 Oct 2015 07:28:00 GMT", "", ""},
		{429, "", "99999999999999999999", "", ""},
		{302, "Found", "", "/elsewhere?\x00\xff", "moved"},
		{101, "Switching Protocols", "", "", ""},
		{0, "", "", "", ""},
		{500, "\x1b[31mboom", "-5", "", "\xff\xfe\x00 body"},
		{404, "Not Found", "1.5", "", "nope"},
	} {
		f.Add(s.status, s.reason, s.retryAfter, s.location, []byte(s.body))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ln.Close() })
	var answer atomic.Pointer[[]byte]
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
				if a := answer.Load(); a != nil {
					_, _ = c.Write(*a)
				}
			}()
		}
	}()
	p := &pusher{e: &Engine{cfg: Config{Clock: systemClock{}, Version: "fuzz"}}}
	pt := resolveTarget(&Target{URL: "http://" + ln.Addr().String() + "/hook", TimeoutSeconds: 5}, 0)
	task := &store.Task{ID: "t_1", Type: "fuzz", Attempt: 1, Payload: []byte(`{}`)}
	f.Fuzz(func(t *testing.T, status uint16, reason, retryAfter, location string, body []byte) {
		head := fmt.Sprintf("HTTP/1.1 %03d %s\r\nContent-Length: %d\r\nConnection: close\r\n", int(status)%1000, reason, len(body))
		if retryAfter != "" {
			head += "Retry-After: " + retryAfter + "\r\n"
		}
		if location != "" {
			head += "Location: " + location + "\r\n"
		}
		raw := append([]byte(head+"\r\n"), body...)
		answer.Store(&raw)
		res := p.attempt(context.Background(), pt, task)
		switch {
		case res.status == 0 && res.err == nil:
			t.Fatal("no status and no error")
		case res.status != 0 && (res.status < 100 || res.status > 999):
			t.Fatalf("status %d", res.status)
		case res.retryAfter < 0:
			t.Fatalf("Retry-After %q read as %v", retryAfter, res.retryAfter)
		case res.timedOut:
			t.Fatalf("timed out on a response sent whole: %v", res.err)
		}
		d := res.detail()
		if !store.ValidText(d) || len(d) > 8<<10 {
			t.Fatalf("detail of %d bytes, valid text %v: %.200q", len(d), store.ValidText(d), d)
		}
		if res.status >= 200 && res.status <= 299 {
			return
		}
		fl := res.failure(pt)
		if fl.Code == "" || fl.Message == "" || fl.RetryAfter < 0 || fl.RetryAfter != res.retryAfter && res.status != 0 {
			t.Fatalf("failure %+v of %+v", fl, res)
		}
		if _, err := retry.ParseClass(fl.Class.String()); err != nil {
			t.Fatalf("failure class %v", fl.Class)
		}
		if res.status != 0 && fl.Code != strconv.Itoa(res.status) {
			t.Fatalf("failure code %q for status %d", fl.Code, res.status)
		}
	})
}
