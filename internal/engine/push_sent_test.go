package engine

import (
	"context"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/store"
)

// failedWrites is a connection whose every write fails as a socket's does
// once the peer has reset it; its reads wait for Close.
type failedWrites struct{ net.Conn }

func (c failedWrites) Write([]byte) (int, error) {
	return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

// TestPushUnwrittenRequestIsNotCalledSent: a delivery whose request never
// left the node (the write to the connection failed) does not say that the
// request was sent and that the target may have received it. net/http
// reports the request written (httptrace's WroteRequest) once it is in the
// connection's buffer, before the flush that sends it, so a failed flush
// read as a request sent whole.
func TestPushUnwrittenRequestIsNotCalledSent(t *testing.T) {
	pt := resolveTarget(&Target{URL: "http://127.0.0.1:9/hook"}, 5*time.Second)
	pt.conns.client = &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			c, peer := net.Pipe()
			t.Cleanup(func() { _ = peer.Close() })
			return failedWrites{c}, nil
		},
	}}
	p := &pusher{e: &Engine{}}
	res := p.attempt(context.Background(), pt, &store.Task{ID: "t1", Type: "push.sent", Attempt: 1, Payload: []byte(`{}`)})
	if res.err == nil {
		t.Fatalf("attempt over a connection whose writes fail: status %d, no error", res.status)
	}
	if f := res.failure(pt); res.sent || strings.Contains(f.Message, "sent") || strings.Contains(f.Message, "may have") {
		t.Errorf("a request whose write failed: sent %v, message %q; want it not called sent", res.sent, f.Message)
	}
}
