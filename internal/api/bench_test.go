package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAPIEnqueue measures enqueue throughput and latency over real
// loopback HTTP with concurrent clients, on SQLite with synchronous=FULL
// (the durable default). One op is one HTTP request (1 or 100 tasks).
func BenchmarkAPIEnqueue(b *testing.B) {
	for _, bc := range []struct {
		name    string
		batch   int
		clients int
	}{
		{"single/clients=16", 1, 16},
		{"batch100/clients=4", 100, 4},
	} {
		b.Run(bc.name, func(b *testing.B) { benchEnqueue(b, bc.batch, bc.clients) })
	}
}

func benchEnqueue(b *testing.B, batch, clients int) {
	e := newEnv(b, envOpts{sync: "FULL"})
	path, body := "/v1/tasks", []byte(`{"type":"bench","payload":{"user":42,"action":"send"}}`)
	if batch > 1 {
		var buf bytes.Buffer
		buf.WriteString(`{"tasks":[`)
		for i := range batch {
			if i > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, `{"type":"bench","payload":{"user":%d,"action":"send"}}`, i)
		}
		buf.WriteString(`]}`)
		path, body = "/v1/tasks/batch", buf.Bytes()
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer hc.CloseIdleConnections()
	url := e.url + path

	lat := make([][]time.Duration, clients)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				res, err := hc.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusCreated {
					b.Errorf("status %d", res.StatusCode)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(all)*batch)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
