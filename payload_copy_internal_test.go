package retryq

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestRequestLeavesTheCopyOfBytePayloadsToTheEngine: a payload given as
// bytes is copied once per enqueue, by the engine's compaction (which
// writes a buffer of its own), not first by request too: on the hot path
// of Go enqueues that was one more allocation and copy of every payload.
// TestEnqueuedBytesAreCopied holds the caller's right to reuse its buffer.
func TestRequestLeavesTheCopyOfBytePayloadsToTheEngine(t *testing.T) {
	raw := bytes.Repeat([]byte(`{"n":1},`), 1024)
	raw = append(append([]byte{'['}, raw[:len(raw)-1]...), ']')
	allocs := func(payload any) float64 {
		var got json.RawMessage
		n := testing.AllocsPerRun(20, func() {
			r, err := request("a", payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			got = r.Payload
		})
		if payload != nil && !bytes.Equal(got, raw) {
			t.Fatalf("request gave the payload %q", got)
		}
		return n
	}
	none := allocs(nil) // the request itself
	for name, payload := range map[string]any{"[]byte": raw, "json.RawMessage": json.RawMessage(raw)} {
		if n := allocs(payload); n > none {
			t.Errorf("%s payload: request made %.0f allocations, %.0f without a payload; want no more (the engine copies it once, compacted)", name, n, none)
		}
	}
}
