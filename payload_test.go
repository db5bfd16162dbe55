package retryq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/backendtest"
)

// TestGoPayloadIsStoredCompacted: a payload given to the Go API as bytes is
// stored compacted, as the HTTP API stores one, so that handlers, push
// targets and HTTP answers all see the same bytes. It was stored as given:
// a push target and a handler got `{ "a" : 1 }` while every HTTP answer
// (whose encoder compacts) showed {"a":1}. Numbers, escapes, member order
// and repeated members stay as given, and the size bound applies to the
// compacted payload, as docs/api.md says. A payload given as a Go value is
// encoded without HTML escapes, as the HTTP API answers: json.Marshal's
// \u003c for < was the same value but not the bytes a push target got
// for the same payload sent over HTTP.
func TestGoPayloadIsStoredCompacted(t *testing.T) {
	backendtest.Run(t, testGoPayloadIsStoredCompacted)
}

func testGoPayloadIsStoredCompacted(t *testing.T, backend string) {
	// An insert is bounded by the lease duration: a minute lets the 8 MiB
	// payload below commit on a loaded machine (with 2 s it timed out).
	e := newEnvOn(t, backendtest.Open(t, backend, ""), retryq.Options{LeaseDuration: time.Minute})
	ctx := context.Background()
	got := make(chan string, 8)
	e.mux.HandleFunc("p", func(ctx context.Context, task *retryq.Task) error {
		got <- string(task.Payload)
		return nil
	})
	cases := []struct {
		payload any
		want    string
	}{
		{json.RawMessage(`{ "b" : 1.0 ,` + "\n\t" + `"a" : [ -0 , 1e400 ], "a":"\u00e9 x" }`), `{"b":1.0,"a":[-0,1e400],"a":"\u00e9 x"}`},
		{[]byte(" null\n"), `null`},
		{json.RawMessage(" \"\u2028 <&>\" "), "\"\u2028 <&>\""},
		{[]byte(`9007199254740993 `), `9007199254740993`},
		// A Go value: <, > and & as they are, not \u003c and so on
		// (encoding/json escapes U+2028 and U+2029 in a Go string whatever).
		{map[string]string{"h": "<b>a & b</b>"}, `{"h":"<b>a & b</b>"}`},
	}
	ids := map[string]string{}
	for _, c := range cases {
		res, err := e.client.Enqueue(ctx, "p", c.payload)
		if err != nil {
			t.Fatalf("Enqueue(%q): %v", c.payload, err)
		}
		if p := string(res.Task.Payload); p != c.want {
			t.Errorf("Enqueue(%q) stored %q, want %q", c.payload, p, c.want)
		}
		ti, err := e.client.Get(ctx, res.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p := string(ti.Payload); p != c.want {
			t.Errorf("Get after Enqueue(%q): %q, want %q", c.payload, p, c.want)
		}
		ids[c.want] = res.Task.ID
	}
	e.startWorker(retryq.WorkerConfig{Concurrency: 2})
	seen := map[string]bool{}
	for range cases {
		select {
		case p := <-got:
			seen[p] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("handlers saw only %v", seen)
		}
	}
	for _, c := range cases {
		if !seen[c.want] {
			t.Errorf("no handler saw %q (saw %v)", c.want, seen)
		}
	}

	// At the bound once compacted, over it as given: taken.
	at := `"` + strings.Repeat("x", retryq.MaxPayloadBytes-2) + `"`
	if _, err := e.client.Enqueue(ctx, "big", json.RawMessage(at+"\n")); err != nil {
		t.Errorf("a payload of MaxPayloadBytes once compacted: %v", err)
	}
	if _, err := e.client.Enqueue(ctx, "big", json.RawMessage(`"x`+at[1:])); !errors.Is(err, retryq.ErrInvalid) {
		t.Errorf("a payload one byte over MaxPayloadBytes: %v, want ErrInvalid", err)
	}
	// Deeper than encoding/json reads: said to be too deep, not "not JSON".
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	if _, err := e.client.Enqueue(ctx, "deep", json.RawMessage(deep)); !errors.Is(err, retryq.ErrInvalid) || !strings.Contains(err.Error(), "deep") {
		t.Errorf("a payload nested 20000 deep: %v, want ErrInvalid saying it is too deep", err)
	}
}
