package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/retryq/retryq/store"
)

var listBytesTests = []testCase{
	{"Read/ListTasksMaxBytes", testListTasksMaxBytes},
	{"Dead/ListMaxBytes", testListDeadMaxBytes},
}

// sizedTask returns a new task whose payload is exactly size bytes long
// (at least the bytes of an empty padding; 0 gives no payload at all).
func sizedTask(id, typ string, size int) store.NewTask {
	n := nt(id, typ)
	if size == 0 {
		n.Payload = nil
		return n
	}
	head := `{"id":"` + id + `","pad":"`
	n.Payload = json.RawMessage(head + strings.Repeat("x", max(size-len(head)-2, 0)) + `"}`)
	return n
}

// payloadSizes are the sizes of the tasks the byte-bound tests list, in
// insert order: small and empty ones, ones as large as the bounds used and
// larger, so that pages are cut in every way.
var payloadSizes = []int{40, 300, 0, 1200, 64, 64, 2500, 100, 900, 0, 700, 5000, 50, 50, 50, 1000, 300, 4100, 80, 0,
	600, 600, 600, 600, 33, 2000, 2000, 45, 1500, 70}

// pageBytes is the payload bytes of a page.
func pageBytes(ts []store.Task) int {
	n := 0
	for _, t := range ts {
		n += len(t.Payload)
	}
	return n
}

// checkBytePages pages through a listing with a byte bound and checks
// every rule of MaxBytes against want, the whole listing in order: each
// page holds the most tasks that fit (at least one), its cursor is its
// last task, and the pages together are want, each task exactly once.
func (e *env) checkBytePages(what string, want []store.Task, limit, maxBytes int, list func(cursor string) ([]store.Task, string, error)) {
	e.t.Helper()
	what = fmt.Sprintf("%s (limit %d, %d bytes)", what, limit, maxBytes)
	at, cursor := 0, ""
	for pages := 0; ; pages++ {
		if pages > len(want)+1 {
			e.t.Fatalf("%s: pagination does not end", what)
		}
		page, next, err := list(cursor)
		e.noErr(what, err)
		// The page is the next tasks of want, as many as fit.
		fit := 0
		for bytes := 0; at+fit < len(want) && fit < limit; fit++ {
			bytes += len(want[at+fit].Payload)
			if fit > 0 && bytes > maxBytes {
				break
			}
		}
		if len(page) != fit {
			e.t.Fatalf("%s: page %d holds %d tasks (%d payload bytes), want %d (from %s)", what, pages, len(page), pageBytes(page), fit, want[at].ID)
		}
		for i, t := range page {
			if t.ID != want[at+i].ID {
				e.t.Fatalf("%s: page %d lists %s at %d, want %s", what, pages, t.ID, i, want[at+i].ID)
			}
			e.sameTask(what+": listed task", t, want[at+i])
		}
		at += len(page)
		if at == len(want) {
			e.eq(what+": cursor after the last page", next, "")
			return
		}
		if len(page) == 0 {
			e.t.Fatalf("%s: empty page %d before %s", what, pages, want[at].ID)
		}
		e.eq(what+": cursor of a page", next, page[len(page)-1].ID)
		cursor = next
	}
}

func testListTasksMaxBytes(e *env) {
	for i, size := range payloadSizes {
		typ := "a"
		if i%3 == 2 {
			typ = "b"
		}
		e.insert(base, sizedTask(fmt.Sprintf("t_%03d", i), typ, size))
	}
	all, next, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: 1000})
	e.noErr("ListTasks", err)
	e.eq("unbounded listing's cursor", next, "")
	e.eq("tasks", len(all), len(payloadSizes))
	for i, t := range all {
		e.eq("payload bytes of "+t.ID, len(t.Payload), payloadSizes[len(all)-1-i])
	}
	var bs []store.Task
	for _, t := range all {
		if t.Type == "b" {
			bs = append(bs, t)
		}
	}
	for _, c := range []struct{ limit, maxBytes int }{
		{1000, 1}, {1000, 1000}, {1000, 2500}, {1000, 4100}, {4, 1500}, {3, 100000}, {7, 6000}, {1000, 100000},
	} {
		e.checkBytePages("ListTasks", all, c.limit, c.maxBytes, func(cursor string) ([]store.Task, string, error) {
			return e.s.ListTasks(e.ctx, store.ListParams{Limit: c.limit, MaxBytes: c.maxBytes, Cursor: cursor})
		})
		e.checkBytePages("ListTasks of type b", bs, c.limit, c.maxBytes, func(cursor string) ([]store.Task, string, error) {
			return e.s.ListTasks(e.ctx, store.ListParams{Type: "b", States: []store.State{store.StatePending}, Limit: c.limit, MaxBytes: c.maxBytes, Cursor: cursor})
		})
	}
	// A bound met exactly by the whole listing ends it.
	page, next, err := e.s.ListTasks(e.ctx, store.ListParams{Limit: len(all), MaxBytes: pageBytes(all)})
	e.noErr("ListTasks", err)
	e.eq("tasks of a page whose bound its payloads meet exactly", len(page), len(all))
	e.eq("cursor of a page whose bound its payloads meet exactly", next, "")

	_, _, err = e.s.ListTasks(e.ctx, store.ListParams{Limit: 10, MaxBytes: -1})
	e.isErr("ListTasks(MaxBytes -1)", err, store.ErrInvalid)
}

func testListDeadMaxBytes(e *env) {
	for i, size := range payloadSizes {
		id := fmt.Sprintf("d_%03d", i)
		died := base.Add(time.Duration(i) * time.Second)
		if i%4 == 3 {
			e.makeState(died, sizedTask(id, "a", size), store.StateSucceeded)
			continue
		}
		t := e.start(died, sizedTask(id, "a", size))
		e.mustRecord(died, kill(t, "E1", store.DeadMaxAttempts))
	}
	all, next, err := e.s.ListDead(e.ctx, store.DeadFilter{Limit: 1000})
	e.noErr("ListDead", err)
	e.eq("unbounded listing's cursor", next, "")
	e.eq("dead tasks", len(all), len(payloadSizes)-len(payloadSizes)/4)
	for _, c := range []struct{ limit, maxBytes int }{
		{1000, 1}, {1000, 1000}, {1000, 2500}, {3, 1500}, {5, 100000}, {1000, 6000},
	} {
		e.checkBytePages("ListDead", all, c.limit, c.maxBytes, func(cursor string) ([]store.Task, string, error) {
			return e.s.ListDead(e.ctx, store.DeadFilter{ErrorCode: "E1", Limit: c.limit, MaxBytes: c.maxBytes, Cursor: cursor})
		})
	}
	_, _, err = e.s.ListDead(e.ctx, store.DeadFilter{Limit: 10, MaxBytes: -1})
	e.isErr("ListDead(MaxBytes -1)", err, store.ErrInvalid)
}
