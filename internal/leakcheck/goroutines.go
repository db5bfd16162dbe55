package leakcheck

import (
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// goroutine is one goroutine of a stack dump.
type goroutine struct {
	id        uint64
	kind      string // the function it was started with (kindOf)
	stack     string // its whole entry in the dump
	unstarted bool   // created but not yet run: kind names a wrapper (unstarted)
}

// snapshot returns the process's goroutines, read from a dump of every
// goroutine's stack (runtime.Stack), but those of the runtime's own
// finalizer and cleanup goroutines (they run user code now and then, and
// are not made by what a test cycles) and, where descriptors are counted,
// a connection's passing readers (connKinds).
//
// A goroutine created with arguments and not yet run shows only the
// compiler's wrapper (main.main.gowrap1), not the function it will run,
// so its kind would differ from its kind a moment later: snapshot waits
// up to a second for such goroutines to run, yielding the processor.
func snapshot() []goroutine {
	deadline := time.Now().Add(time.Second)
	for {
		gs := dump()
		if !slices.ContainsFunc(gs, func(g goroutine) bool { return g.unstarted }) || time.Now().After(deadline) {
			return gs
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// dump reads the process's goroutines once (snapshot).
func dump() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	skipConns := FDsKnown()
	var out []goroutine
	for entry := range strings.SplitSeq(string(buf), "\n\n") {
		g, ok := parseGoroutine(entry)
		if !ok || !counted(g.kind, skipConns) {
			continue
		}
		out = append(out, g)
	}
	return out
}

// runtimeKinds are the goroutines of the runtime that a dump shows while
// they run user code (a finalizer, a cleanup).
var runtimeKinds = map[string]bool{"runtime.runFinalizers": true, "runtime.runCleanups": true, "runtime.runfinq": true}

// connKinds are goroutines that a connection starts now and then and
// that end with the connection or at its next read, however long it
// stays idle: pgx reads in the background while a write of a connection
// lasts more than 15 ms (a loaded machine), and the reader stays blocked
// in its read after the write. They are not counted where descriptors
// are: a connection left open is a descriptor more.
var connKinds = map[string]bool{"github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead": true}

// counted reports whether goroutines of kind count, where descriptors
// are counted (fds) or not.
func counted(kind string, fds bool) bool {
	return !runtimeKinds[kind] && !(fds && connKinds[kind])
}

// parseGoroutine reads one entry of runtime.Stack's dump:
//
//	goroutine 20 [chan receive]:
//	main.main.func2()
//		/tmp/x.go:13 +0x19
//	created by main.main in goroutine 1
//		/tmp/x.go:13 +0xba
func parseGoroutine(entry string) (goroutine, bool) {
	entry = strings.TrimSpace(entry)
	lines := strings.Split(entry, "\n")
	head, ok := strings.CutPrefix(lines[0], "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idText, _, _ := strings.Cut(head, " ")
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	kind := kindOf(lines[1:])
	return goroutine{id: id, kind: kind, stack: entry, unstarted: gowrap.MatchString(kind)}, true
}

// gowrap matches the compiler's wrapper of a go statement whose function
// takes arguments (main.main.gowrap1): a goroutine's dump names it, above
// runtime.goexit, only until the goroutine first runs.
var gowrap = regexp.MustCompile(`\.gowrap[0-9]+$`)

// kindOf names a goroutine by the function it was started with: the
// bottom frame of its stack, above a sync.WaitGroup.Go wrapper; where the
// dump elided the bottom frames, by the function that created it. Two
// goroutines of one kind do the same job whatever started them: a loop
// restarted from another place is still one loop.
func kindOf(lines []string) string {
	var funcs []string
	creator := ""
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "\t"), l == "":
		case strings.HasPrefix(l, "created by "):
			creator, _, _ = strings.Cut(strings.TrimPrefix(l, "created by "), " in goroutine ")
		case strings.HasPrefix(l, "..."):
			funcs = append(funcs, "") // frames elided: the bottom one is unknown
		default:
			name := l
			if i := strings.LastIndex(name, "("); i > 0 {
				name = name[:i]
			}
			funcs = append(funcs, name)
		}
	}
	for len(funcs) > 1 && (funcs[len(funcs)-1] == "runtime.goexit" || strings.HasPrefix(funcs[len(funcs)-1], "sync.(*WaitGroup).Go")) {
		funcs = funcs[:len(funcs)-1]
	}
	if len(funcs) == 0 || funcs[len(funcs)-1] == "" {
		return "created by " + creator
	}
	return funcs[len(funcs)-1]
}

// countKinds counts gs by kind.
func countKinds(gs []goroutine) map[string]int {
	out := make(map[string]int)
	for _, g := range gs {
		out[g.kind]++
	}
	return out
}
