package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLongPollsCapped: once MaxLongPolls lease requests wait on a node,
// one more that asks to wait is answered at once: with the tasks due now
// when there are some, else with ErrTooManyLongPolls. A slot freed by a
// waiting request is taken again by the next one.
func TestLongPollsCapped(t *testing.T) {
	e := startWorkerEngine(t, openWorkerStoreOn(t, "sqlite"), Config{NoScheduler: true, MaxLongPolls: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.Lease(ctx, LeaseRequest{WorkerID: "py", Types: []string{"cap.idle"}, Max: 1, Wait: 30 * time.Second})
			done <- err
		}()
	}
	waitLongPolls(t, e, 2)

	start := time.Now()
	_, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"cap.idle"}, Max: 1, Wait: 30 * time.Second})
	if !errors.Is(err, ErrTooManyLongPolls) {
		t.Fatalf("third long poll: err = %v, want ErrTooManyLongPolls", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the refused long poll took %v", took)
	}
	if n := e.LongPolls(); n != 2 {
		t.Fatalf("LongPolls = %d after a refusal, want 2", n)
	}

	// Over the cap, a task due now is still handed out.
	id := mustEnqueue(t, e, "cap.busy", `1`)
	ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"cap.busy"}, Max: 1, Wait: 30 * time.Second})
	if err != nil || len(ts) != 1 || ts[0].ID != id {
		t.Fatalf("long poll over the cap with a task due: %v, %v; want the task", ts, err)
	}

	// A request that does not ask to wait is never refused.
	if ts, err := e.Lease(context.Background(), LeaseRequest{WorkerID: "py", Types: []string{"cap.idle"}, Max: 1}); err != nil || len(ts) != 0 {
		t.Fatalf("lease without wait over the cap: %v, %v", ts, err)
	}

	// The waiting requests end; their slots are free again.
	cancel()
	for range 2 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a long poll did not end 10s after its caller left")
		}
	}
	waitLongPolls(t, e, 0)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		_, err := e.Lease(ctx2, LeaseRequest{WorkerID: "py", Types: []string{"cap.idle"}, Max: 1, Wait: 30 * time.Second})
		done <- err
	}()
	waitLongPolls(t, e, 1)
	cancel2()
	<-done
}

// TestMaxLongPollsValidated: a negative cap is a configuration error
// naming the field; zero takes the default.
func TestMaxLongPollsValidated(t *testing.T) {
	st := openWorkerStoreOn(t, "sqlite")
	if _, err := New(Config{Store: st, MaxLongPolls: -1}); err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("MaxLongPolls -1: err = %v, want an ErrInvalid", err)
	} else if want := "MaxLongPolls"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
	e, err := New(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config().MaxLongPolls; got != DefaultMaxLongPolls {
		t.Fatalf("default MaxLongPolls = %d, want %d", got, DefaultMaxLongPolls)
	}
}

func waitLongPolls(t *testing.T, e *Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.LongPolls() != n {
		if time.Now().After(deadline) {
			t.Fatalf("LongPolls = %d, want %d within 10s", e.LongPolls(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
