package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// The ids docs/api.md writes where a real one goes: a task id and a lease
// id. Each example's route says which real id stands in for them.
const (
	docTaskID  = "01HXZ5K3J8T9M2Q4V6W8Y0A1B2"
	docLeaseID = docTaskID + ".7f3c…"
)

// docRoute is what the test knows about the route an example calls: the
// status the doc promises, the state the example implies (before) and what
// the answer is remembered for (after).
type docRoute struct {
	method, pattern string // pattern: path segments, * for any one
	status          int
	shows           bool // every example on the route shows its answer
	before          func(r *docRun, ex *docExample) (taskID, leaseID string)
	after           func(r *docRun, ex *docExample, got map[string]any)
}

// leased is a task an example leased, not yet completed or failed.
type leased struct{ id, lease, typ string }

// docRun is the state carried from one example to the next, in document
// order.
type docRun struct {
	t        *testing.T
	e        *env
	recv     string            // the local stand-in for the doc's push target hosts
	subst    map[string]string // doc strings and what stands in for them
	lastTask string            // the task the last enqueue example created
	leased   []leased
}

// docRoutes lists every route docs/api.md gives a curl example for. An
// example on a route missing here, or a route here with no example, fails
// the test: a new example needs its expectations stated.
var docRoutes = []docRoute{
	{method: "GET", pattern: "/healthz", status: 200, shows: true},
	{method: "GET", pattern: "/readyz", status: 200, shows: true},
	{method: "GET", pattern: "/v1/stats", status: 200},
	{method: "GET", pattern: "/v1/nodes", status: 200, shows: true, before: (*docRun).waitLeader},
	{method: "GET", pattern: "/v1/types/*", status: 200, shows: true},
	{method: "POST", pattern: "/v1/tasks/*/cancel", status: 200, shows: true, before: (*docRun).useLastTask},
	{method: "POST", pattern: "/v1/tasks", status: 201, after: func(r *docRun, _ *docExample, got map[string]any) {
		r.lastTask, _ = got["id"].(string)
	}},
	{method: "POST", pattern: "/v1/tasks/batch", status: 201},
	{method: "GET", pattern: "/v1/tasks/*", status: 200, before: (*docRun).useLastTask},
	{method: "GET", pattern: "/v1/tasks", status: 200, before: (*docRun).useLastTask},
	{method: "POST", pattern: "/v1/tasks/*/retry", status: 200, before: func(r *docRun, _ *docExample) (string, string) {
		return r.makeDead("docs.retry", "500"), ""
	}, after: func(r *docRun, ex *docExample, got map[string]any) {
		if got["state"] != "pending" {
			r.t.Errorf("docs line %d: a retried task is %v, want pending", ex.line, got["state"])
		}
	}},
	{method: "PUT", pattern: "/v1/types/*", status: 200, shows: true, before: (*docRun).localTargets},
	{method: "GET", pattern: "/v1/dlq", status: 200, before: func(r *docRun, ex *docExample) (string, string) {
		u, _ := url.Parse(ex.url)
		q := u.Query()
		r.makeDead(q.Get("type"), q.Get("error_code"))
		return "", ""
	}, after: func(r *docRun, ex *docExample, got map[string]any) {
		if ts, _ := got["tasks"].([]any); len(ts) == 0 {
			r.t.Errorf("docs line %d: the DLQ example lists no task: %v", ex.line, got)
		}
	}},
	{method: "GET", pattern: "/v1/dlq/summary", status: 200, shows: true},
	{method: "POST", pattern: "/v1/dlq/redrive", status: 200, shows: true},
	{method: "POST", pattern: "/v1/dlq/purge", status: 200, shows: true},
	{method: "POST", pattern: "/v1/leases", status: 200, shows: true, before: (*docRun).enqueueForLease, after: (*docRun).rememberLeases},
	{method: "POST", pattern: "/v1/leases/*/heartbeat", status: 200, shows: true, before: func(r *docRun, ex *docExample) (string, string) {
		l := r.nextLeased(ex, false)
		return l.id, l.lease
	}},
	{method: "POST", pattern: "/v1/tasks/*/complete", status: 200, shows: true, before: func(r *docRun, ex *docExample) (string, string) {
		l := r.nextLeased(ex, true)
		return l.id, l.lease
	}},
	{method: "POST", pattern: "/v1/tasks/*/fail", status: 200, shows: true, before: func(r *docRun, ex *docExample) (string, string) {
		l := r.nextLeased(ex, true)
		return l.id, l.lease
	}},
}

// TestDocsAPIExamplesRunAsShown runs every curl example of docs/api.md, in
// document order, against a real server over a real SQLite file, as curl
// would send it: each must get the status the doc promises and an answer
// with the members (and the values, but for counts, ids and times) the doc
// shows for it.
func TestDocsAPIExamplesRunAsShown(t *testing.T) {
	vars := map[string]string{}
	exs, err := readDocExamples("../../docs/api.md", vars)
	if err != nil {
		t.Fatal(err)
	}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // a downstream that is down
	}))
	t.Cleanup(recv.Close)
	r := &docRun{t: t, e: newEnv(t, envOpts{}), recv: recv.URL, subst: map[string]string{}}
	used := make([]bool, len(docRoutes))
	for i := range exs {
		ex := &exs[i]
		path, ok := strings.CutPrefix(ex.url, vars["RQ"]+"/")
		if vars["RQ"] == "" || !ok {
			t.Fatalf("docs line %d: URL %q does not start with $RQ/", ex.line, ex.url)
		}
		path, _, _ = strings.Cut("/"+path, "?")
		ri := slices.IndexFunc(docRoutes, func(rt docRoute) bool { return rt.method == ex.method && pathMatches(rt.pattern, path) })
		if ri < 0 {
			t.Fatalf("docs line %d: %s %s is on no route docRoutes knows", ex.line, ex.method, path)
		}
		used[ri] = true
		if docRoutes[ri].shows && len(ex.shown) == 0 {
			t.Errorf("docs line %d: the example no longer shows its answer (a json block must follow its sh block, or # lines under the command)", ex.line)
		}
		r.run(ex, docRoutes[ri], vars["RQ"], r.e)
		if ex.header.Get("Authorization") != "" {
			r.checkToken(ex, docRoutes[ri], vars)
		}
	}
	for i, u := range used {
		if !u {
			t.Errorf("docs/api.md has no curl example for %s %s any more", docRoutes[i].method, docRoutes[i].pattern)
		}
	}
}

// checkToken runs an example that sends $TOKEN against a server started
// with that token as its --api-token: it must pass, and fail 401 without
// the header.
func (r *docRun) checkToken(ex *docExample, rt docRoute, vars map[string]string) {
	e := newEnv(r.t, envOpts{apiTokens: []string{vars["TOKEN"]}})
	e.token = "" // send only what the example sends
	r.run(ex, rt, vars["RQ"], e)
	bare := *ex
	bare.header = ex.header.Clone()
	bare.header.Del("Authorization")
	bare.shown = nil
	rt.status, rt.before, rt.after = http.StatusUnauthorized, nil, nil
	r.run(&bare, rt, vars["RQ"], e)
}

func pathMatches(pattern, path string) bool {
	p, s := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(p) != len(s) {
		return false
	}
	for i := range p {
		if p[i] != "*" && p[i] != s[i] {
			return false
		}
	}
	return true
}

// run sends one example to e as curl would and checks the answer.
func (r *docRun) run(ex *docExample, rt docRoute, rq string, e *env) {
	t := r.t
	t.Helper()
	var taskID, leaseID string
	if rt.before != nil {
		taskID, leaseID = rt.before(r, ex)
	}
	target := e.url + strings.TrimPrefix(ex.url, rq)
	replace := func(s string) (string, error) {
		if strings.Contains(s, docLeaseID) {
			if leaseID == "" {
				return "", fmt.Errorf("docs line %d: a lease id, but the route binds none", ex.line)
			}
			s = strings.ReplaceAll(s, docLeaseID, leaseID)
		}
		if strings.Contains(s, docTaskID) {
			if taskID == "" {
				return "", fmt.Errorf("docs line %d: a task id, but the route binds none", ex.line)
			}
			s = strings.ReplaceAll(s, docTaskID, taskID)
		}
		for from, to := range r.subst {
			s = strings.ReplaceAll(s, from, to)
		}
		return s, nil
	}
	var err error
	if target, err = replace(target); err != nil {
		t.Fatal(err)
	}
	var rd io.Reader
	if ex.hasBody {
		s, err := replace(string(ex.body))
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(s)
	}
	req, err := http.NewRequest(ex.method, target, rd)
	if err != nil {
		t.Fatalf("docs line %d: %v", ex.line, err)
	}
	req.Header.Set("User-Agent", "curl/8.5.0")
	req.Header.Set("Accept", "*/*")
	for k, v := range ex.header {
		req.Header[k] = v
	}
	res, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("docs line %d: %s %s: %v", ex.line, ex.method, target, err)
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("docs line %d: read answer: %v", ex.line, err)
	}
	if res.StatusCode != rt.status {
		t.Fatalf("docs line %d: %s %s: got %d %s, want %d", ex.line, ex.method, target, res.StatusCode, raw, rt.status)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("docs line %d: answer is not a JSON object: %v: %s", ex.line, err, raw)
	}
	if len(ex.shown) > 0 {
		var errs []string
		for _, want := range ex.shown {
			err := r.matchShown(want, got, "")
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			t.Errorf("docs line %d: the answer %s is not the one shown: %s", ex.line, raw, strings.Join(errs, "; or "))
		}
	}
	if rt.after != nil {
		rt.after(r, ex, got)
	}
}

// matchShown checks got against an answer the doc shows: every member it
// shows is there with the same kind of value, and the same value but for
// counts (docCounts) and strings that stand for one (times, ids, "...").
func (r *docRun) matchShown(want, got any, at string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: got %v, want an object", at, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s.%s: missing", at, k)
			}
			if err := r.matchShown(wv, gv, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(w) > 0 && len(g) == 0 {
			return fmt.Errorf("%s: got %v, want a non-empty array", at, got)
		}
		for i, gv := range g {
			wv := w[0] // a list of like objects, shown by its first
			if len(w) == len(g) {
				wv = w[i]
			}
			if err := r.matchShown(wv, gv, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case string:
		g, ok := got.(string)
		if !ok {
			return fmt.Errorf("%s: got %v, want a string", at, got)
		}
		if s := r.subst[w]; s != "" {
			w = s
		}
		if !standsIn(w) && g != w {
			return fmt.Errorf("%s: got %q, want %q", at, g, w)
		}
	case float64:
		g, ok := got.(float64)
		if !ok {
			return fmt.Errorf("%s: got %v, want a number", at, got)
		}
		if !docCounts[at[strings.LastIndexByte(at, '.')+1:]] && g != w {
			return fmt.Errorf("%s: got %v, want %v", at, g, w)
		}
	case bool:
		if got != w {
			return fmt.Errorf("%s: got %v, want %v", at, got, w)
		}
	case nil: // null in the doc: any value, since it changes
	}
	return nil
}

// docCounts are the members whose numbers in a shown answer are only
// examples: how many tasks the user's queue happens to hold.
var docCounts = map[string]bool{"count": true, "total": true, "redriven": true, "purged": true}

// standsIn reports whether a string the doc shows only stands for a value.
func standsIn(s string) bool {
	if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return true
	}
	return isTaskID(s) || strings.Contains(s, "...") || strings.Contains(s, "…")
}

func (r *docRun) useLastTask(ex *docExample) (string, string) {
	if r.lastTask == "" {
		r.t.Fatalf("docs line %d: names a task, but no example before it enqueued one", ex.line)
	}
	return r.lastTask, ""
}

// waitLeader waits until the test's one node shows as the leader: its
// election runs apart from Start.
func (r *docRun) waitLeader(*docExample) (string, string) {
	waitFor(r.t, "the node to lead", 10*time.Second, func() bool {
		ns, _ := r.e.must(http.StatusOK, "GET", "/v1/nodes", nil).m["nodes"].([]any)
		return len(ns) == 1 && ns[0].(map[string]any)["role"] == "leader"
	})
	return "", ""
}

// localTargets points a push target's URL at the local receiver (a
// downstream that answers 503), keeping its path: the doc's host is the
// user's.
func (r *docRun) localTargets(ex *docExample) (string, string) {
	var b struct {
		Target struct {
			URL string `json:"url"`
		} `json:"target"`
	}
	if err := json.Unmarshal(ex.body, &b); err != nil {
		r.t.Fatalf("docs line %d: body: %v", ex.line, err)
	}
	if u, err := url.Parse(b.Target.URL); err == nil && u.Host != "" {
		r.subst[b.Target.URL] = r.recv + u.Path
	}
	return "", ""
}

// makeDead returns a task of typ that died of an error with code: pushed to
// the receiver when typ has a push target (which answers 503), else leased
// and failed.
func (r *docRun) makeDead(typ, code string) string {
	e := r.e
	id := e.enqueue(map[string]any{"type": typ, "max_attempts": 1})["id"].(string)
	if e.must(http.StatusOK, "GET", "/v1/types/"+typ, nil).m["target"] == nil {
		l := e.leaseOne(typ, nil)
		e.must(http.StatusOK, "POST", "/v1/tasks/"+id+"/fail", map[string]any{
			"lease_id": l["lease_id"], "error": map[string]any{"code": code, "message": "set up by the docs test"}})
	}
	waitFor(r.t, "task "+id+" dead", 10*time.Second, func() bool { return e.state(id) == "dead" })
	last, _ := e.must(http.StatusOK, "GET", "/v1/tasks/"+id, nil).m["last_error"].(map[string]any)
	if code != "" && last["code"] != code {
		r.t.Fatalf("set-up task %s of %s died with %v, want code %s", id, typ, last, code)
	}
	return id
}

// enqueueForLease enqueues two tasks of the lease example's first type,
// with the payload its shown answer has, so the lease has work to hand out.
func (r *docRun) enqueueForLease(ex *docExample) (string, string) {
	var b struct {
		Types []string `json:"types"`
	}
	if err := json.Unmarshal(ex.body, &b); err != nil || len(b.Types) == 0 {
		r.t.Fatalf("docs line %d: a lease body without types: %v", ex.line, err)
	}
	var payload any
	if len(ex.shown) > 0 {
		if m, ok := ex.shown[0].(map[string]any); ok {
			if ts, ok := m["tasks"].([]any); ok && len(ts) > 0 {
				payload = ts[0].(map[string]any)["payload"]
			}
		}
	}
	for range 2 {
		r.e.enqueue(map[string]any{"type": b.Types[0], "payload": payload})
	}
	return "", ""
}

func (r *docRun) rememberLeases(ex *docExample, got map[string]any) {
	ts, _ := got["tasks"].([]any)
	if len(ts) == 0 {
		r.t.Fatalf("docs line %d: the lease example leased nothing", ex.line)
	}
	for _, x := range ts {
		m := x.(map[string]any)
		r.leased = append(r.leased, leased{id: m["id"].(string), lease: m["lease_id"].(string), typ: m["type"].(string)})
	}
}

// nextLeased returns the oldest task leased by an example and not yet
// finished (taking it off the list when take is set), leasing one more of
// the same type when the example's lease gave too few.
func (r *docRun) nextLeased(ex *docExample, take bool) leased {
	if len(r.leased) == 0 {
		r.t.Fatalf("docs line %d: names a lease, but no lease example ran before it", ex.line)
	}
	l := r.leased[0]
	if take {
		r.leased = r.leased[1:]
		if len(r.leased) == 0 {
			r.e.enqueue(map[string]any{"type": l.typ})
			m := r.e.leaseOne(l.typ, nil)
			r.leased = append(r.leased, leased{id: m["id"].(string), lease: m["lease_id"].(string), typ: l.typ})
		}
	}
	return l
}
