package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzEnqueueCommand runs "retryq enqueue" with arbitrary flag values
// against a real server. What the command lets through, the server takes:
// every run either exits 2 with a message naming the argument at fault,
// or exits 0 with a task whose type, key, priority, run time and payload are the
// ones given. Exit 1 would mean the server refused what the command
// accepted, or the command sent something other than it was given.
func FuzzEnqueueCommand(f *testing.F) {
	s := startAPIServer(f, nil)
	for _, seed := range []struct {
		typ, payload, key, delay, priority, runAt string
	}{
		{"email.send", `{"to":"a@example.com"}`, "order-42", "", "", ""},
		{"a", `[1, 2.50, "x\u00e9", null]`, "", "10m", "5", ""},
		{"a", "{}", "", "", "", "2030-01-01T00:00:00.5+02:00"},
		{"a", "{}", "", "", "", "0000-01-01T00:30:00+01:00"},
		{"a", "{}", "", "", "", "9999-12-31T23:30:00-01:00"},
		{"a/b:c", `"\ud83d\ude00"`, "k", "0.5", "-1000000", ""},
		{"a", "{\"s\":\"\xff\"}", "\xfe", "", "", ""},
		{"a", `{"a":1,"a":2}`, "dup", "", "1e3", ""},
		{"a", "1e400", "", "-1s", "", ""},
		{"a", " ", "", "", "", ""},
		{"a..b", "null", "", "1h", "1000001", ""},
		{"a", "{}", "", "999ns", "", ""},
		{"a", "{}", "", "87600h0m0.000001s", "", ""},
	} {
		f.Add(seed.typ, seed.payload, seed.key, seed.delay, seed.priority, seed.runAt)
	}
	f.Fuzz(func(t *testing.T, typ, payload, key, delay, priority, runAt string) {
		for _, v := range []string{typ, payload, key, delay, priority, runAt} {
			if strings.IndexByte(v, 0) >= 0 || strings.HasPrefix(v, "-") && v != delay && v != priority {
				return // not an argument a shell can pass, or a flag
			}
		}
		if strings.HasPrefix(payload, "@") {
			return // a file name: not this target's subject
		}
		args := []string{"enqueue", typ, "--payload", payload, "--server", s.url, "--json"}
		if key != "" {
			args = append(args, "--key", key)
		}
		if delay != "" {
			args = append(args, "--delay="+delay)
		}
		if priority != "" {
			args = append(args, "--priority="+priority)
		}
		if runAt != "" {
			args = append(args, "--run-at="+runAt)
		}
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		status := Main(ctx, args, strings.NewReader(""), &out, &errOut)
		switch status {
		case exitUsage:
			if !strings.HasPrefix(errOut.String(), "retryq enqueue: ") {
				t.Fatalf("%q: usage error without the command's name: %s", args, errOut.String())
			}
			return
		case exitOK:
		default:
			t.Fatalf("%q: status %d\nstdout: %s\nstderr: %s", args, status, out.String(), errOut.String())
		}
		var task apiTask
		if err := json.Unmarshal(out.Bytes(), &task); err != nil {
			t.Fatalf("%q: output is not a task: %v\n%s", args, err, out.String())
		}
		if task.IdempotencyKey != key {
			t.Fatalf("%q: task %s has key %q, want %q", args, task.ID, task.IdempotencyKey, key)
		}
		if task.Duplicate {
			return // the first task of the key is answered
		}
		if task.Type != typ {
			t.Fatalf("%q: task %s has type %q", args, task.ID, task.Type)
		}
		if p, err := strconv.Atoi(priority); err == nil && task.Priority != p {
			t.Fatalf("%q: task %s has priority %d", args, task.ID, task.Priority)
		}
		if at, err := time.Parse(time.RFC3339Nano, runAt); err == nil && !task.RunAt.Equal(at) {
			t.Fatalf("%q: task %s runs at %v", args, task.ID, task.RunAt)
		}
		if d, err := parseDuration(delay); err == nil {
			// The delay counts from the request's arrival; the server
			// stamps the creation when its shared insert commits, later.
			if early := task.CreatedAt.Add(d).Sub(task.RunAt); early < -time.Microsecond || early > time.Minute {
				t.Fatalf("%q: task %s created at %v runs at %v", args, task.ID, task.CreatedAt, task.RunAt)
			}
		}
		var want, got any
		if err := json.Unmarshal([]byte(payload), &want); err != nil {
			t.Fatalf("%q: accepted a payload encoding/json refuses: %v", args, err)
		}
		if err := json.Unmarshal(task.Payload, &got); err != nil || !reflect.DeepEqual(want, got) {
			t.Fatalf("%q: task %s has payload %s (%v)", args, task.ID, task.Payload, err)
		}
	})
}
