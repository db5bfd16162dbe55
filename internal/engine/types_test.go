package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/sqlite"
)

// countingStore is a real SQLite store whose GetType calls are counted and,
// while gate is set, held until the gate closes or fail with failErr.
type countingStore struct {
	store.Store
	gets    atomic.Int64
	mu      sync.Mutex
	gate    chan struct{}
	failErr error
}

func (s *countingStore) GetType(ctx context.Context, typ string) (store.TypeConfig, error) {
	s.gets.Add(1)
	s.mu.Lock()
	gate, failErr := s.gate, s.failErr
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return store.TypeConfig{}, ctx.Err()
		}
	}
	if failErr != nil {
		return store.TypeConfig{}, failErr
	}
	return s.Store.GetType(ctx, typ)
}

func (s *countingStore) hold() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
	return s.gate
}

func (s *countingStore) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failErr = err
}

func newTypesEngine(t *testing.T) (*Engine, *countingStore) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "types.db"), Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: st}
	e, err := New(Config{Store: cs, NodeID: "types-node", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return e, cs
}

// age makes typ's cached entry older than the cache TTL, but not so old
// that it may no longer be served while a load replaces it.
func age(e *Engine, typ string) { ageBy(e, typ, typeCacheTTL+typeCacheTTL/2) }

// ageBy makes typ's cached entry d older.
func ageBy(e *Engine, typ string, d time.Duration) {
	e.types.mu.Lock()
	defer e.types.mu.Unlock()
	old := *e.types.m[typ]
	old.loaded = old.loaded.Add(-d)
	e.types.m[typ] = &old
}

func putStored(t *testing.T, cs *countingStore, typ string, prio int) {
	t.Helper()
	if _, err := cs.Store.PutType(context.Background(), store.TypeConfig{Type: typ, Priority: prio}, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestTypeCacheConcurrentFirstUseSharesOneLoad(t *testing.T) {
	e, cs := newTypesEngine(t)
	putStored(t, cs, "ocr", 3)
	gate := cs.hold()
	const callers = 20
	var wg sync.WaitGroup
	prios := make([]int, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec, err := e.TypeSpec(context.Background(), "ocr")
			prios[i], errs[i] = spec.Priority, err
		}()
	}
	waitFor(t, "the first load", func() bool { return cs.gets.Load() >= 1 })
	// Give the other callers time to reach the held load. The check below
	// holds however many do: a caller arriving after the load finds the
	// cached entry, one arriving during it must share it.
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || prios[i] != 3 {
			t.Fatalf("caller %d: priority %d, err %v; want 3, nil", i, prios[i], errs[i])
		}
	}
	if n := cs.gets.Load(); n != 1 {
		t.Fatalf("%d concurrent first uses read the store %d times, want once", callers, n)
	}
}

func TestTypeCacheServesStaleWhileOneLoadRefreshes(t *testing.T) {
	e, cs := newTypesEngine(t)
	putStored(t, cs, "ocr", 3)
	if _, err := e.TypeSpec(context.Background(), "ocr"); err != nil {
		t.Fatal(err)
	}
	putStored(t, cs, "ocr", 7) // as another node would: this engine is not told
	age(e, "ocr")
	gate := cs.hold()
	for i := range 10 {
		// While the refresh is held, every caller gets the stale entry at once.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		spec, err := e.TypeSpec(ctx, "ocr")
		cancel()
		if err != nil || spec.Priority != 3 {
			t.Fatalf("call %d during refresh: priority %d, err %v; want the stale 3", i, spec.Priority, err)
		}
	}
	waitFor(t, "the refresh to reach the store", func() bool { return cs.gets.Load() >= 2 })
	if n := cs.gets.Load(); n != 2 {
		t.Fatalf("store read %d times, want 2 (first load, one refresh)", n)
	}
	close(gate)
	waitFor(t, "the refreshed priority", func() bool {
		spec, err := e.TypeSpec(context.Background(), "ocr")
		return err == nil && spec.Priority == 7
	})
}

func TestTypeCacheKeepsLastKnownWhenRefreshFails(t *testing.T) {
	e, cs := newTypesEngine(t)
	putStored(t, cs, "ocr", 3)
	if _, err := e.TypeSpec(context.Background(), "ocr"); err != nil {
		t.Fatal(err)
	}
	age(e, "ocr")
	boom := errors.New("database away")
	cs.setFail(boom)
	for range 3 {
		spec, err := e.TypeSpec(context.Background(), "ocr")
		if err != nil || spec.Priority != 3 {
			t.Fatalf("priority %d, err %v; want the last known 3", spec.Priority, err)
		}
	}
	// An unknown type with the store failing: the error comes through.
	if _, err := e.TypeSpec(context.Background(), "never-loaded"); !errors.Is(err, boom) {
		t.Fatalf("first load of a type while the store fails: err %v, want %v", err, boom)
	}
	cs.setFail(nil)
	waitFor(t, "a successful refresh", func() bool {
		if _, err := e.TypeSpec(context.Background(), "ocr"); err != nil {
			t.Fatal(err)
		}
		e.types.mu.Lock()
		defer e.types.mu.Unlock()
		return time.Since(e.types.m["ocr"].loaded) < typeCacheTTL
	})
}

// TestTypeCacheTooStaleEntryWaitsBriefly: an entry past typeCacheMaxStale
// is read again before it is used, but a read that hangs or fails does not
// hold its callers: after typeStaleWait at most they get the last known
// configuration.
func TestTypeCacheTooStaleEntryWaitsBriefly(t *testing.T) {
	e, cs := newTypesEngine(t)
	putStored(t, cs, "ocr", 3)
	if _, err := e.TypeSpec(context.Background(), "ocr"); err != nil {
		t.Fatal(err)
	}
	putStored(t, cs, "ocr", 7) // as another node would: this engine is not told
	ageBy(e, "ocr", time.Minute)
	gate := cs.hold()
	start := time.Now()
	spec, err := e.TypeSpec(context.Background(), "ocr")
	if waited := time.Since(start); err != nil || spec.Priority != 3 || waited > typeStaleWait+2*time.Second {
		t.Fatalf("while the read hangs: priority %d, err %v after %s; want the last known 3 after about %s", spec.Priority, err, waited, typeStaleWait)
	}
	close(gate)
	waitFor(t, "the read to finish", func() bool {
		spec, err := e.TypeSpec(context.Background(), "ocr")
		return err == nil && spec.Priority == 7
	})
	ageBy(e, "ocr", time.Minute)
	cs.setFail(errors.New("database away"))
	if spec, err := e.TypeSpec(context.Background(), "ocr"); err != nil || spec.Priority != 7 {
		t.Fatalf("while the read fails: priority %d, err %v; want the last known 7", spec.Priority, err)
	}
}

func TestTypeCacheInvalidatedByPutType(t *testing.T) {
	e, cs := newTypesEngine(t)
	putStored(t, cs, "ocr", 3)
	if _, err := e.TypeSpec(context.Background(), "ocr"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.PutType(context.Background(), TypeSpec{Type: "ocr", Policy: e.cfg.DefaultPolicy, Priority: 5}); err != nil {
		t.Fatal(err)
	}
	spec, err := e.TypeSpec(context.Background(), "ocr")
	if err != nil || spec.Priority != 5 {
		t.Fatalf("after PutType on this engine: priority %d, err %v; want 5 at once", spec.Priority, err)
	}
}

func TestTypeCacheWaiterGivesUpWithItsContext(t *testing.T) {
	e, cs := newTypesEngine(t)
	gate := cs.hold()
	defer close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.TypeSpec(ctx, "ocr"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the caller's deadline", err)
	}
}

func TestValidateTypeSegments(t *testing.T) {
	for _, ok := range []string{"email.send", "a/b", "ai:embed/v2", "x..y", ".hidden", "a/.b", "v1.2/..x"} {
		if err := ValidateType("type", ok); err != nil {
			t.Errorf("ValidateType(%q) = %v, want ok", ok, err)
		}
	}
	for _, bad := range []string{"a/../b", "a/./b", "..", ".", "a/", "/a", "a//b", "a/.."} {
		if err := ValidateType("type", bad); err == nil || !strings.Contains(err.Error(), "segment") {
			t.Errorf("ValidateType(%q) = %v, want an error about the segment", bad, err)
		}
	}
}

// TestTargetValidateHeaders: a target whose headers no delivery could send
// as configured is refused, naming the header: two spellings of one name
// (each delivery sent whichever value the map's order gave last),
// hop-by-hop headers (HTTP/2 refuses or drops them) and a Host that
// net/http would cut.
func TestTargetValidateHeaders(t *testing.T) {
	for _, c := range []struct {
		headers map[string]string
		field   string // "" = valid
	}{
		{map[string]string{"X-Key": "a", "Authorization": "Bearer t"}, ""},
		{map[string]string{"Host": "api.example:8443"}, ""},
		{map[string]string{"X-Key": "a", "x-key": "b"}, `target.headers["x-key"]`},
		{map[string]string{"AUTHORIZATION": "a", "authorization": "b"}, `target.headers["authorization"]`},
		{map[string]string{"Upgrade": "websocket"}, `target.headers["Upgrade"]`},
		{map[string]string{"TE": "trailers"}, `target.headers["TE"]`},
		{map[string]string{"Proxy-Connection": "keep-alive"}, `target.headers["Proxy-Connection"]`},
		{map[string]string{"Host": "a.example/evil"}, `target.headers["Host"]`},
		{map[string]string{"Host": "a.example extra"}, `target.headers["Host"]`},
		// Outside the host grammar, net/http sends an empty Host instead
		// (HTTP/1) or fails the request (HTTP/2).
		{map[string]string{"Host": "a.example?x"}, `target.headers["Host"]`},
		{map[string]string{"Host": "a.example#x"}, `target.headers["Host"]`},
		{map[string]string{"Host": "user@a.example"}, `target.headers["Host"]`},
		{map[string]string{"Host": `a.example"`}, `target.headers["Host"]`},
		{map[string]string{"Host": "[::1]:8443"}, ""},
		{map[string]string{"Host": "bücher.example"}, ""}, // sent in its IDNA form
	} {
		tg := Target{URL: "http://127.0.0.1:9/", Headers: c.headers}
		err := tg.Validate()
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%v: %v, want valid", c.headers, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%v: %v, want an error on %s", c.headers, err, c.field)
		}
	}
}

// TestTargetValidateURL: a target URL whose port is outside 1 to 65535 is
// refused when the type is stored, rather than failing every delivery
// (each an attempt) with "invalid port"; so is one without a host name,
// which net/http would send to the local machine.
func TestTargetValidateURL(t *testing.T) {
	for _, c := range []struct {
		url   string
		valid bool
	}{
		{"http://127.0.0.1:9/", true},
		{"https://hooks.example/x?k=v", true},
		{"http://[::1]:8080/", true},
		{"http://hooks.example:65535/", true},
		{"http://hooks.example:0/", false},
		{"http://hooks.example:65536/", false},
		{"http://hooks.example:99999/", false},
		{"ftp://hooks.example/", false},
		// No host name: net/http dials the local machine.
		{"http://:8080/", false},
		{"http://[]:8080/", false},
	} {
		err := (&Target{URL: c.url}).Validate()
		var fe *FieldError
		switch {
		case c.valid && err != nil:
			t.Errorf("%s: %v, want valid", c.url, err)
		case !c.valid && (!errors.As(err, &fe) || fe.Field != "target.url"):
			t.Errorf("%s: %v, want an error on target.url", c.url, err)
		}
	}
}

// TestPolicyChangedElsewhereDecidesTheNextAttempt: a type's policy changed
// on another node while its tasks wait applies to their next attempt on
// this node, however long ago this node last used the type. Before, an
// entry of any age was served as it stood while a background read replaced
// it, so the first attempt after a quiet spell ran and was decided under a
// configuration that could be hours old: a limit raised to rescue waiting
// tasks still dead-lettered them.
func TestPolicyChangedElsewhereDecidesTheNextAttempt(t *testing.T) {
	ctx := context.Background()
	st := openWorkerStoreOn(t, "sqlite")
	put := func(maxAttempts int) {
		t.Helper()
		pol, err := json.Marshal(retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond, Jitter: retry.JitterNone, MaxAttempts: maxAttempts})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutType(ctx, store.TypeConfig{Type: "rare", Policy: pol}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	put(1)
	e := startWorkerEngine(t, st, Config{NodeID: "stale-type"})
	if spec, err := e.TypeSpec(ctx, "rare"); err != nil || spec.Policy.MaxAttempts != 1 {
		t.Fatalf("type rare: max attempts %d, %v; want 1", spec.Policy.MaxAttempts, err)
	}
	var calls atomic.Int32
	runWorker(t, e, WorkerConfig{Types: []string{"rare"}, Concurrency: 1, Handle: func(context.Context, *store.Task) error {
		if calls.Add(1) == 1 {
			return retry.Transient(errors.New("flaky"))
		}
		return nil
	}})
	waitFor(t, "the worker to fetch", func() bool { return e.Counters().Fetches > 0 })
	put(3)                        // on another node: this engine is not told
	ageBy(e, "rare", time.Minute) // this node last used the type a minute ago
	prio := 0                     // an explicit priority: the enqueue does not read the type
	res, err := e.Enqueue(ctx, EnqueueRequest{Type: "rare", Payload: json.RawMessage(`1`), Priority: &prio})
	if err != nil {
		t.Fatal(err)
	}
	tk := waitTask(t, e, res.Task.ID, "the task to finish", func(tk store.Task) bool { return tk.State.Terminal() })
	if tk.State != store.StateSucceeded || tk.Attempt != 2 {
		t.Fatalf("task %s after %d attempts (dead reason %q); want succeeded at its second attempt, under the changed max attempts 3",
			tk.State, tk.Attempt, tk.DeadReason)
	}
}

// TestPolicyChangedDuringAnAttemptDecidesIt: an attempt is decided under
// its type's policy as it stands when the attempt ends. A change made
// through this node applies at once (docs/architecture.md), so a limit
// raised while attempts hang on an outage rescues those attempts too;
// before, each was decided under the policy read when it started and went
// to the dead-letter queue under the old limit.
func TestPolicyChangedDuringAnAttemptDecidesIt(t *testing.T) {
	ctx := context.Background()
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NodeID: "policy-during-attempt"})
	pol := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: time.Millisecond, Jitter: retry.JitterNone, MaxAttempts: 1}
	if _, err := e.PutType(ctx, TypeSpec{Type: "slow", Policy: pol}); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan int, 4), make(chan struct{})
	runWorker(t, e, WorkerConfig{Types: []string{"slow"}, Concurrency: 1, Handle: func(ctx context.Context, tk *store.Task) error {
		started <- tk.Attempt
		if tk.Attempt > 1 {
			return nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return retry.Transient(errors.New("upstream down"))
	}})
	res, err := e.Enqueue(ctx, EnqueueRequest{Type: "slow", Payload: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, 10*time.Second, "the first attempt")
	pol.MaxAttempts = 3 // the operator raises the limit while the attempt hangs
	if _, err := e.PutType(ctx, TypeSpec{Type: "slow", Policy: pol}); err != nil {
		t.Fatal(err)
	}
	close(release)
	tk := waitTask(t, e, res.Task.ID, "the task to finish", func(tk store.Task) bool { return tk.State.Terminal() })
	if tk.State != store.StateSucceeded || tk.Attempt != 2 {
		t.Fatalf("task %s after %d attempts (dead reason %q); want succeeded at its second attempt, decided under max attempts 3",
			tk.State, tk.Attempt, tk.DeadReason)
	}
}

// TestPolicyChangedDuringADeliveryDecidesIt: the same for a push delivery,
// decided under its type's policy as it stands when the answer came.
func TestPolicyChangedDuringADeliveryDecidesIt(t *testing.T) {
	p := newPushEnvOn(t, "sqlite", 0)
	sent, release := make(chan struct{}, 4), make(chan struct{})
	var n atomic.Int32
	srv := target(t, func(w http.ResponseWriter, r *http.Request) {
		sent <- struct{}{}
		if n.Add(1) > 1 {
			w.WriteHeader(http.StatusOK)
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	tg := Target{URL: srv.URL}
	p.putType("hook", fastPolicy(1), tg)
	id := p.enqueue("hook", `1`)
	recvWithin(t, sent, 10*time.Second, "the first delivery")
	p.putType("hook", fastPolicy(3), tg) // the operator raises the limit while the delivery hangs
	close(release)
	if tk := p.wait(id, store.StateSucceeded, store.StateDead); tk.State != store.StateSucceeded || tk.Attempt != 2 {
		t.Fatalf("task %s after %d attempts (dead reason %q); want succeeded at its second attempt, decided under max attempts 3",
			tk.State, tk.Attempt, tk.DeadReason)
	}
}
