package leakcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records the failure of a check instead of failing the test.
type fakeTB struct {
	testing.TB
	failure string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	panic(f)
}

// failure runs check with a fakeTB over t and returns its failure ("" when
// it passed).
func failure(t *testing.T, check func(tb testing.TB)) string {
	t.Helper()
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != f {
				panic(r)
			}
		}()
		check(f)
	}()
	return f.failure
}

// blockedUntil is a goroutine's function that waits for stop.
func blockedUntil(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	<-stop
}

// otherBlockedUntil is blockedUntil under another name: another kind.
func otherBlockedUntil(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	<-stop
}

// TestSettledSeesAGoroutineLeftBlocked: a goroutine started after the
// baseline and blocked fails the check, naming its function; once it
// returned, the check passes.
func TestSettledSeesAGoroutineLeftBlocked(t *testing.T) {
	b := Take(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go blockedUntil(stop, &wg)
	msg := failure(t, func(tb testing.TB) { b.Settled(tb, 200*time.Millisecond, "a goroutine left blocked") })
	if !strings.Contains(msg, "leakcheck.blockedUntil") || !strings.Contains(msg, "goroutines_test.go") {
		t.Fatalf("Settled with a goroutine left blocked: %q, want its kind and stack", msg)
	}
	close(stop)
	wg.Wait()
	b.Settled(t, 5*time.Second, "the goroutine returned")
}

// TestSettledSeesALeakBehindAnEndedGoroutine: a goroutine of one kind
// left behind fails the check although another kind's goroutine ended
// meanwhile, leaving the process's count where it was.
func TestSettledSeesALeakBehindAnEndedGoroutine(t *testing.T) {
	var wg sync.WaitGroup
	first, second := make(chan struct{}), make(chan struct{})
	wg.Add(1)
	go blockedUntil(first, &wg)
	b := Take(t)
	close(first)
	wg.Wait()
	wg.Add(1)
	go otherBlockedUntil(second, &wg)
	msg := failure(t, func(tb testing.TB) { b.Settled(tb, 200*time.Millisecond, "one goroutine for another") })
	if !strings.Contains(msg, "1 more goroutines started in github.com/retryq/retryq/internal/leakcheck.otherBlockedUntil (0 before)") {
		t.Fatalf("Settled with a goroutine of another kind in place of one that ended: %q, want the new kind", msg)
	}
	close(second)
	wg.Wait()
	b.Settled(t, 5*time.Second, "both goroutines returned")
}

// TestSettledSeesAFileLeftOpenAtTheDeadline: a file opened after the
// baseline and left open fails the check, naming the file.
func TestSettledSeesAFileLeftOpenAtTheDeadline(t *testing.T) {
	if !FDsKnown() {
		t.Skip("descriptors are counted on Linux only")
	}
	b := Take(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "left-open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	msg := failure(t, func(tb testing.TB) { b.Settled(tb, 200*time.Millisecond, "a file left open") })
	if !strings.Contains(msg, "1 descriptors more than before") || !strings.Contains(msg, f.Name()) {
		t.Fatalf("Settled with a file left open: %q, want the file named", msg)
	}
}

// TestTakeRefusesAParallelTest: a parallel test's baseline would count the
// goroutines and descriptors of the tests beside it, so Take fails it.
func TestTakeRefusesAParallelTest(t *testing.T) {
	t.Run("parallel", func(t *testing.T) {
		t.Parallel()
		msg := failure(t, func(tb testing.TB) { Take(tb) })
		if !strings.Contains(msg, "runs in parallel with other tests") {
			t.Fatalf("Take in a parallel test: %q, want a refusal", msg)
		}
	})
}

// TestKindOf names goroutines by the function they were started with,
// under a sync.WaitGroup.Go wrapper and above runtime.goexit, and by their
// creator where the dump elided the bottom of the stack; a goroutine not
// yet run shows the go statement's wrapper and is marked unstarted.
func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		dump, want string
	}{
		{"goroutine 20 [chan receive]:\nmain.main.func2()\n\t/x.go:13 +0x19\ncreated by main.main in goroutine 1\n\t/x.go:13 +0xba", "main.main.func2"},
		{"goroutine 19 [chan receive]:\nmain.work(0xc000012345, {0x1, 0x2})\n\t/x.go:12 +0x19\nsync.(*WaitGroup).Go.func1()\n\t/go/src/sync/waitgroup.go:258 +0x4a\n" +
			"created by sync.(*WaitGroup).Go in goroutine 1\n\t/go/src/sync/waitgroup.go:238 +0x73", "main.work"},
		{"goroutine 7 [select]:\nmain.deep(...)\n\t/x.go:3\n...additional frames elided...\ncreated by main.start in goroutine 1\n\t/x.go:9 +0x1", "created by main.start"},
		{"goroutine 1 [running]:\nmain.main()\n\t/x.go:15 +0xe5", "main.main"},
		{"goroutine 8 [runnable]:\nmain.noargs()\n\t/x.go:10\nruntime.goexit({})\n\t/go/src/runtime/asm_amd64.s:1771 +0x1\n" +
			"created by main.main in goroutine 1\n\t/x.go:16 +0xc6", "main.noargs"},
		{"goroutine 7 [runnable]:\nmain.main.gowrap1()\n\t/x.go:15\nruntime.goexit({})\n\t/go/src/runtime/asm_amd64.s:1771 +0x1\n" +
			"created by main.main in goroutine 1\n\t/x.go:15 +0xba", "main.main.gowrap1"},
	} {
		g, ok := parseGoroutine(c.dump)
		if !ok || g.kind != c.want || g.stack != c.dump || g.unstarted != strings.Contains(c.want, "gowrap") {
			t.Errorf("parseGoroutine(%q) = %+v, %v; want kind %q", c.dump, g, ok, c.want)
		}
	}
	if _, ok := parseGoroutine("not a goroutine"); ok {
		t.Error("parseGoroutine accepted a line that is not a goroutine's")
	}
}

// TestConnectionReadersCountAsTheirDescriptor: pgx's background reader,
// which a connection keeps blocked in a read after a slow write for as
// long as it stays idle, is not counted where the connection is, as a
// descriptor; the runtime's finalizer goroutine never is, other kinds
// always are.
func TestConnectionReadersCountAsTheirDescriptor(t *testing.T) {
	const reader = "github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"
	for _, c := range []struct {
		kind string
		fds  bool
		want bool
	}{
		{reader, true, false},
		{reader, false, true},
		{"runtime.runFinalizers", false, false},
		{"github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck", true, true},
	} {
		if got := counted(c.kind, c.fds); got != c.want {
			t.Errorf("counted(%s, descriptors counted %v) = %v, want %v", c.kind, c.fds, got, c.want)
		}
	}
}

// TestSnapshotNamesAGoroutineJustCreated: a goroutine created with
// arguments and not yet run counts as the function it runs, not as the
// go statement's wrapper (which once let a leak pass behind a baseline
// taken while another goroutine had not yet run).
func TestSnapshotNamesAGoroutineJustCreated(t *testing.T) {
	for range 20 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go otherBlockedUntil(stop, &wg)
		kinds := countKinds(snapshot())
		close(stop)
		wg.Wait()
		if n := kinds["github.com/retryq/retryq/internal/leakcheck.otherBlockedUntil"]; n != 1 {
			t.Fatalf("snapshot just after the go statement: %d goroutines of its function, want 1 (kinds %v)", n, kinds)
		}
	}
}
