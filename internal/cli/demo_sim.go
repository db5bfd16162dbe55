package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// simAPI is the demo's simulated "AI API": an HTTP server on 127.0.0.1 that
// misbehaves the way hosted model APIs do:
//
//   - every answer takes 20–200 ms;
//   - beyond its rate limit (and now and then anyway) it answers 429 with
//     Retry-After: 1;
//   - a few percent of requests, and most requests in short bursts every
//     5 seconds, get 503;
//   - from 40% to 60% of the run it is down: first every request gets 503,
//     then connections are dropped without an answer;
//   - inputs marked "bad": true are rejected with 400 invalid_format, which
//     no retry can fix.
type simAPI struct {
	srv   *http.Server
	ln    net.Listener
	url   string
	start time.Time
	run   time.Duration // the demo's duration; the outage is placed in it
	limit int64         // requests per second before 429s

	// window is the current rate-limit second and its request count.
	mu          sync.Mutex
	windowStart time.Time
	windowCount int64

	stats simStats
	wg    sync.WaitGroup
}

// simStats counts the simulated API's answers.
type simStats struct {
	requests, ok, limited, unavailable, dropped, badInput atomic.Int64
}

// simPhase is what the simulated API is doing at a moment of the run.
type simPhase int

const (
	phaseOK simPhase = iota
	phaseBurst
	phaseOutage503
	phaseOutageDrop
)

func (p simPhase) String() string {
	switch p {
	case phaseBurst:
		return "503 burst"
	case phaseOutage503:
		return "OUTAGE: every request gets 503"
	case phaseOutageDrop:
		return "OUTAGE: connections dropped"
	}
	return "ok"
}

// Timing of the simulated failures.
const (
	simBurstEvery = 5 * time.Second
	simBurstAt    = 2 * time.Second // offset of each burst in its period
	simBurstLen   = 600 * time.Millisecond
)

// outage returns the outage window of a run of length d: 40% to 60% of it.
func outageWindow(d time.Duration) (from, to time.Duration) {
	return d * 4 / 10, d * 6 / 10
}

// phaseAt is the simulated API's phase at elapsed time e of a run of length d.
func phaseAt(e, d time.Duration) simPhase {
	from, to := outageWindow(d)
	switch {
	case e >= from && e < to:
		if e < from+(to-from)/2 {
			return phaseOutage503
		}
		return phaseOutageDrop
	case e%simBurstEvery >= simBurstAt && e%simBurstEvery < simBurstAt+simBurstLen:
		return phaseBurst
	}
	return phaseOK
}

// startSimAPI starts the simulated API on 127.0.0.1 with a rate limit of
// limit requests per second.
func startSimAPI(start time.Time, run time.Duration, limit int64) (*simAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simulated API: %w", err)
	}
	s := &simAPI{ln: ln, url: "http://" + ln.Addr().String(), start: start, run: run, limit: max(limit, 5)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/{model}", s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// close stops the simulated API, waiting at most a few seconds for
// requests in flight.
func (s *simAPI) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	s.wg.Wait()
}

// phase is the current phase.
func (s *simAPI) phase() simPhase { return phaseAt(time.Since(s.start), s.run) }

// overLimit counts a request in the current one-second window and reports
// whether it is over the rate limit.
func (s *simAPI) overLimit(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.windowStart) >= time.Second {
		s.windowStart, s.windowCount = now, 0
	}
	s.windowCount++
	return s.windowCount > s.limit
}

func (s *simAPI) handle(w http.ResponseWriter, r *http.Request) {
	s.stats.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	// Latency first: a real API is slow to fail too.
	lat := time.NewTimer(time.Duration(20+rand.IntN(181)) * time.Millisecond)
	select {
	case <-lat.C:
	case <-r.Context().Done():
		lat.Stop()
		return
	}
	switch s.phase() {
	case phaseOutageDrop:
		s.stats.dropped.Add(1)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	case phaseOutage503:
		s.unavailable(w, "upstream overloaded, try again later")
		return
	case phaseBurst:
		if rand.Float64() < 0.7 {
			s.unavailable(w, "model temporarily unavailable")
			return
		}
	}
	if s.overLimit(time.Now()) || rand.Float64() < 0.03 {
		s.stats.limited.Add(1)
		w.Header().Set("Retry-After", "1")
		simJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]string{
			"type": "rate_limit_exceeded", "message": "rate limit reached, retry after 1s"}})
		return
	}
	if rand.Float64() < 0.03 {
		s.unavailable(w, "model temporarily unavailable")
		return
	}
	if isBadInput(body) {
		s.stats.badInput.Add(1)
		simJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
			"type": "invalid_format", "message": "input could not be parsed: invalid_format"}})
		return
	}
	s.stats.ok.Add(1)
	simJSON(w, http.StatusOK, map[string]any{"model": r.PathValue("model"), "tokens": len(body) / 4, "result": "ok"})
}

func (s *simAPI) unavailable(w http.ResponseWriter, msg string) {
	s.stats.unavailable.Add(1)
	simJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{"type": "unavailable", "message": msg}})
}

func simJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// isBadInput reports whether a request body holds "bad": true, at the top
// level or one object down (the payload may arrive wrapped).
func isBadInput(body []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	for k, v := range m {
		if k == "bad" && string(v) == "true" {
			return true
		}
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) == nil && string(inner["bad"]) == "true" {
			return true
		}
	}
	return false
}

// simSummary describes the simulated API's answers in one line.
func (s *simAPI) summary() string {
	st := &s.stats
	return fmt.Sprintf("%d requests: %d ok, %d rate-limited (429), %d unavailable (503), %d dropped connections, %d bad input (400)",
		st.requests.Load(), st.ok.Load(), st.limited.Load(), st.unavailable.Load(), st.dropped.Load(), st.badInput.Load())
}
