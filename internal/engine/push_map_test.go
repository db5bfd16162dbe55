package engine

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
)

func TestPushTimeoutDefaultsToTypeTimeout(t *testing.T) {
	for _, c := range []struct {
		tg   Target
		tt   time.Duration
		want time.Duration
	}{
		{Target{URL: "http://x/"}, 0, DefaultPushTimeout},
		{Target{URL: "http://x/"}, 7 * time.Second, 7 * time.Second},
		{Target{URL: "http://x/", TimeoutSeconds: 0.25}, 7 * time.Second, 250 * time.Millisecond},
	} {
		pt := resolveTarget(&c.tg, c.tt)
		if pt.timeout != c.want || pt.method != "POST" || pt.concurrency != DefaultPushConcurrency {
			t.Errorf("resolveTarget(%+v, %v) = timeout %v method %s concurrency %d", c.tg, c.tt, pt.timeout, pt.method, pt.concurrency)
		}
	}
}

func TestPushFailureMapping(t *testing.T) {
	pt := &pushTarget{timeout: 200 * time.Millisecond}
	for _, c := range []struct {
		res   pushResult
		code  string
		class retry.Class
	}{
		{pushResult{status: 408}, "408", retry.ClassTransient},
		{pushResult{status: 429, retryAfter: time.Second}, "429", retry.ClassTransient},
		{pushResult{status: 500}, "500", retry.ClassTransient},
		{pushResult{status: 501}, "501", retry.ClassPermanent},
		{pushResult{status: 503}, "503", retry.ClassTransient},
		{pushResult{status: 404}, "404", retry.ClassPermanent},
		{pushResult{status: 308, location: "/x"}, "308", retry.ClassPermanent},
		{pushResult{err: context.DeadlineExceeded, timedOut: true}, "timeout", retry.ClassTransient},
		{pushResult{err: fmt.Errorf("post: %w", io.EOF)}, "connection_reset", retry.ClassTransient},
		{pushResult{err: fmt.Errorf("post: %w", io.ErrUnexpectedEOF)}, "connection_reset", retry.ClassTransient},
		{pushResult{err: fmt.Errorf("tls: bad certificate")}, CodeDeliveryError, retry.ClassUnknown},
	} {
		f := c.res.failure(pt)
		if f.Code != c.code || f.Class != c.class || f.Message == "" {
			t.Errorf("%+v → code %q class %s message %q; want %q %s", c.res, f.Code, f.Class, f.Message, c.code, c.class)
		}
		if c.res.status == 429 && f.RetryAfter != time.Second {
			t.Errorf("429: RetryAfter %v, want 1s", f.RetryAfter)
		}
	}
	// The payload-free detail of a body-less response, and printable excerpts.
	if d := (&pushResult{status: 204}).detail(); d != "HTTP 204" {
		t.Errorf("detail = %q", d)
	}
	if s := printable([]byte("a\x00b\xe2\x82")); s != "a\uFFFDb\uFFFD" {
		t.Errorf("printable = %q", s)
	}
}
