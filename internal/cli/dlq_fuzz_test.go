package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzDLQListCommand runs "retryq dlq list" with arbitrary filter values
// against a real server holding dead tasks. What the command lets
// through, the server takes: every run either exits 2 with a message
// naming the flag at fault, or exits 0 with a page whose tasks all match
// the filter. Exit 1 would mean the server refused a filter the command
// accepted, answered with the server's field name instead of the flag's.
func FuzzDLQListCommand(f *testing.F) {
	s := startAPIServer(f, nil)
	killTasks(f, s, "pay.charge", "402", 2)
	killTasks(f, s, "mail.send", "", 1)
	for _, seed := range []struct{ typ, code, reason, since string }{
		{"pay.charge", "402", "non_retryable", "1h"},
		{"", "", "", "2024-05-01T12:00:00Z"},
		{"mail.send", "", "max_attempts", "0000-01-01T00:30:00+01:00"},
		{"", "\xff", "", ""},
		{"a b", "x", "bogus", "-1s"},
		{"", strings.Repeat("c", 201), "", "9999-12-31T23:59:59.999999999Z"},
		{"", "exit:1", "retry_window", "1e9"},
	} {
		f.Add(seed.typ, seed.code, seed.reason, seed.since)
	}
	f.Fuzz(func(t *testing.T, typ, code, reason, since string) {
		args := []string{"dlq", "list", "--server", s.url, "--json"}
		for _, fl := range []struct{ name, v string }{{"type", typ}, {"error-code", code}, {"reason", reason}, {"since", since}} {
			if strings.IndexByte(fl.v, 0) >= 0 {
				return // not an argument a shell can pass
			}
			if fl.v != "" {
				args = append(args, "--"+fl.name+"="+fl.v)
			}
		}
		start := time.Now()
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		switch status := Main(ctx, args, strings.NewReader(""), &out, &errOut); status {
		case exitUsage:
			if !strings.HasPrefix(errOut.String(), "retryq dlq list: --") {
				t.Fatalf("%q: usage error not naming a flag: %s", args, errOut.String())
			}
			return
		case exitOK:
		default:
			t.Fatalf("%q: status %d\nstdout: %s\nstderr: %s", args, status, out.String(), errOut.String())
		}
		var page apiTaskPage
		if err := json.Unmarshal(out.Bytes(), &page); err != nil {
			t.Fatalf("%q: output is not a page: %v\n%s", args, err, out.String())
		}
		// A duration ago counts from when the command ran: no later than
		// now, so the bound is at most since(now).
		var after time.Time
		if since != "" {
			var msg string
			if after, msg = parseSince("--since", since, start); msg != "" {
				t.Fatalf("%q: exit 0, but --since is refused: %s", args, msg)
			}
		}
		for _, task := range page.Tasks {
			if typ != "" && task.Type != typ || reason != "" && task.DeadReason != reason ||
				code != "" && (task.LastError == nil || task.LastError.Code != code) ||
				task.UpdatedAt.Before(after.Truncate(time.Microsecond)) {
				t.Fatalf("%q: task %s (%s, %s, %v, died %v) does not match", args, task.ID, task.Type, task.DeadReason, task.LastError, task.UpdatedAt)
			}
		}
	})
}
