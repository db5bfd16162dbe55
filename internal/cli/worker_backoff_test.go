//go:build linux

package cli

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWorkerHonoursRetryAfterWhenOverloaded: a node whose long-poll slots
// are all taken answers a lease request 503 overloaded with Retry-After: 1
// (as any 503 of the API). The worker asks again no sooner than that. It
// used to back off from 250ms, so its first retries came at 250ms and
// 750ms, inside the second the server asked it to wait.
func TestWorkerHonoursRetryAfterWhenOverloaded(t *testing.T) {
	s := startAPIServer(t, func(o *serverOptions) { o.maxLongPolls = 1 })

	// The only long-poll slot, held by another worker for the whole test
	// (asking again when a probe below held it, or its 30s passed).
	hogCtx, stopHog := context.WithCancel(context.Background())
	var hogDone sync.WaitGroup
	hogDone.Add(1)
	go func() {
		defer hogDone.Done()
		for hogCtx.Err() == nil {
			body := `{"worker_id":"hog","types":["cli.none"],"wait_seconds":30}`
			req, _ := http.NewRequestWithContext(hogCtx, "POST", s.url+"/v1/leases", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() { stopHog(); hogDone.Wait() })
	pollUntil(t, 10*time.Second, "the long-poll slot to be taken", func() bool {
		b := bytes.NewReader([]byte(`{"worker_id":"probe","types":["cli.none"],"wait_seconds":0.001}`))
		resp, err := http.Post(s.url+"/v1/leases", "application/json", b)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, func() string { return "" })

	// The worker talks to the server through a proxy that notes when each
	// lease request arrives.
	target, _ := url.Parse(s.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var mu sync.Mutex
	var leaseCalls []time.Time
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/v1/leases" {
			mu.Lock()
			leaseCalls = append(leaseCalls, time.Now())
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	calls := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), leaseCalls...)
	}

	stderr := startWorkerProcess(t, t.TempDir(), "--server", proxy.URL, "--types", "cli.busy", "--exec", "true",
		"--worker-id", "overloaded-worker", "--grace", "1s")
	diag := func() string { return "worker stderr:\n" + stderr.String() }
	pollUntil(t, 20*time.Second, "four lease requests", func() bool { return len(calls()) >= 4 }, diag)
	if !strings.Contains(stderr.String(), "overloaded") {
		t.Fatalf("the worker's lease requests were not answered 503 overloaded\n%s", diag())
	}
	at := calls()
	for i := 1; i < 4; i++ {
		// A little under the second: the two clocks are one, but the
		// proxy notes a request as it arrives.
		if gap := at[i].Sub(at[i-1]); gap < 950*time.Millisecond {
			t.Errorf("lease request %d came %v after the previous one's 503 with Retry-After: 1", i+1, gap)
		}
	}
}
