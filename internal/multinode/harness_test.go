package multinode

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq"
	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/internal/pgtest"
	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
	"github.com/retryq/retryq/store/postgres"
)

// TestMain turns the test binary into a node process when envNode is set,
// and otherwise runs the tests, stopping the PostgreSQL clusters afterwards.
func TestMain(m *testing.M) {
	if os.Getenv(envNode) == "1" {
		os.Exit(nodeMain())
	}
	pgtest.Main(m)
}

// envKeepLogs names a directory where the tests leave the nodes' logs
// instead of a temporary directory.
const envKeepLogs = "RETRYQ_MULTINODE_LOGDIR"

// Workload parameters shared by the tests.
const (
	maxAttempts  = 4                     // the type's policy: "fail" tasks die after 4 attempts
	retryDelay   = 50 * time.Millisecond // fixed backoff, no jitter
	leaderTTL    = 3 * time.Second
	leaseDur     = 5 * time.Second
	nodeCount    = 3
	takeoverWait = 15 * time.Second // a new leader must be elected within this of the kill
)

// workloadTask returns the payload of task i: 70% succeed at once, 15% fail
// transiently once or twice and then succeed, 10% always fail (dead
// max_attempts) and 5% fail permanently (dead non_retryable). Handlers take
// 1 to 4 ms.
func workloadTask(i int) payload {
	p := payload{I: i, D: 1 + i%4}
	switch r := i % 20; {
	case r < 14:
		p.K = classOK
	case r < 17:
		p.K, p.N = classFlaky, 1+(i/20)%2
	case r < 19:
		p.K = classFail
	default:
		p.K = classPerm
	}
	return p
}

// cluster is one test's database plus its node processes.
type cluster struct {
	t     *testing.T
	pg    *pgtest.Cluster
	url   string
	dir   string
	st    *postgres.Store
	nodes map[string]*nodeProc
	ids   map[int]string // workload index -> task id
}

type nodeProc struct {
	id      string
	cmd     *exec.Cmd
	runLog  string
	logPath string
	done    chan struct{} // closed when the process exited
	waitErr error
	killed  time.Time // when it was SIGKILLed and reaped (zero if not)
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	pg := pgtest.NewCluster(t)
	url := pg.NewDatabase(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, postgres.Config{URL: url, AutoMigrate: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	dir := t.TempDir()
	if keep := os.Getenv(envKeepLogs); keep != "" {
		// Keep the node logs and run logs for a look afterwards.
		dir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, pat := range []string{"runs-*.log", "node-*.log"} {
			old, _ := filepath.Glob(filepath.Join(dir, pat))
			for _, f := range old {
				os.Remove(f)
			}
		}
		t.Logf("node logs in %s", dir)
	}
	c := &cluster{t: t, pg: pg, url: url, dir: dir, st: st, nodes: map[string]*nodeProc{}}
	t.Cleanup(c.killAll)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.sortedNodes() {
				t.Logf("log of node %s (warnings and errors, last 6000 bytes):\n%s", n.id, c.nodeWarnings(n, 6000))
			}
		}
	})
	return c
}

// nodeWarnings returns the tail of a node's log lines at WARN and above,
// except the expected per-task ones.
func (c *cluster) nodeWarnings(n *nodeProc, maxBytes int) string {
	b, _ := os.ReadFile(n.logPath)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "level=INFO") && !strings.Contains(l, "level=DEBUG") && l != "" {
			keep = append(keep, l)
		}
	}
	s := strings.Join(keep, "\n")
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
	}
	return s
}

// startNode starts one node process (the test binary in node mode).
func (c *cluster) startNode(id string) *nodeProc {
	c.t.Helper()
	n := &nodeProc{
		id:      id,
		runLog:  filepath.Join(c.dir, "runs-"+id+".log"),
		logPath: filepath.Join(c.dir, "node-"+id+".log"),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(n.logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close() // the child keeps its own descriptor
	n.cmd = exec.Command(os.Args[0], "-test.run=^$")
	u, err := url.Parse(c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", id) // lets the test see the node's backends
	u.RawQuery = q.Encode()
	n.cmd.Env = append(os.Environ(),
		envNode+"=1", envURL+"="+u.String(), envID+"="+id, envRunLog+"="+n.runLog,
		envLeaderTTL+"="+leaderTTL.String(), envLease+"="+leaseDur.String())
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		c.t.Fatalf("start node %s: %v", id, err)
	}
	go func() {
		n.waitErr = n.cmd.Wait()
		close(n.done)
	}()
	c.nodes[id] = n
	return n
}

func (n *nodeProc) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the node and waits until it is gone.
func (c *cluster) kill(n *nodeProc) {
	c.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill node %s: %v", n.id, err)
	}
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("node %s did not die within 10s of SIGKILL", n.id)
	}
	n.killed = time.Now()
}

// stopAll asks the live nodes to shut down gracefully and checks they exit 0.
func (c *cluster) stopAll() {
	c.t.Helper()
	for _, n := range c.nodes {
		if !n.exited() {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range c.sortedNodes() {
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			c.t.Errorf("node %s did not stop within 30s of SIGTERM", n.id)
			continue
		}
		if n.killed.IsZero() && n.waitErr != nil {
			c.t.Errorf("node %s exited with %v; its log:\n%s", n.id, n.waitErr, c.nodeLog(n, 4000))
		}
	}
}

func (c *cluster) killAll() {
	for _, n := range c.nodes {
		if !n.exited() {
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
}

func (c *cluster) sortedNodes() []*nodeProc {
	out := make([]*nodeProc, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (c *cluster) nodeLog(n *nodeProc, maxBytes int) string {
	b, _ := os.ReadFile(n.logPath)
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	return string(b)
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for i := 0; ; i++ {
		ok, err := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) || i > int(timeout/(50*time.Millisecond))+100 {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.t.Context(), 10*time.Second)
}

// leader returns the scheduler lease holder and whether its lease is live.
func (c *cluster) leader() (string, bool, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	var id string
	var live bool
	err := c.st.Pool().QueryRow(ctx, "SELECT node_id, expires_at > now() FROM leader WHERE name = 'scheduler'").Scan(&id, &live)
	return engine.LeaseHolderNode(id), live, err
}

// liveNodes lists the nodes that heartbeated in the last 10 s.
func (c *cluster) liveNodes() ([]store.Node, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	return c.st.ListNodes(ctx, time.Now().Add(-10*time.Second))
}

// startNodes starts n nodes and waits until they are all registered and one
// of them leads.
func (c *cluster) startNodes(n int) {
	c.t.Helper()
	for i := range n {
		c.startNode(fmt.Sprintf("node-%c", 'a'+i))
	}
	waitFor(c.t, 60*time.Second, "all nodes registered and a leader elected", func() (bool, error) {
		for _, nd := range c.nodes {
			if nd.exited() {
				c.t.Fatalf("node %s exited early (%v):\n%s", nd.id, nd.waitErr, c.nodeLog(nd, 4000))
			}
		}
		ns, err := c.liveNodes()
		if err != nil {
			return false, err
		}
		seen := 0
		for _, x := range ns {
			if _, ok := c.nodes[x.ID]; ok {
				seen++
			}
		}
		id, live, err := c.leader()
		if err != nil {
			return false, err
		}
		_, ours := c.nodes[id]
		return seen == n && live && ours, nil
	})
}

// configure stores the workload type's policy: fixed 50ms backoff without
// jitter, at most maxAttempts attempts, 30s per attempt.
func (c *cluster) configure(client *retryq.Client) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	pol := retry.Policy{Backoff: retry.BackoffFixed, InitialDelay: retryDelay, MaxDelay: retryDelay, Jitter: retry.JitterNone, MaxAttempts: maxAttempts}
	if err := client.SetType(ctx, retryq.TypeConfig{Type: taskType, Policy: pol, Timeout: 30 * time.Second}); err != nil {
		c.t.Fatalf("set type: %v", err)
	}
}

// newClient is the test's own client, used only to configure and enqueue.
func (c *cluster) newClient() *retryq.Client {
	c.t.Helper()
	client, err := retryq.NewClient(c.st, retryq.Options{NodeID: "test-enqueuer", NoScheduler: true})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := client.Start(c.t.Context()); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { client.Close() })
	return client
}

// enqueue enqueues the workload's tasks 0..n-1 in batches of 500.
func (c *cluster) enqueue(client *retryq.Client, n int) {
	c.t.Helper()
	c.ids = make(map[int]string, n)
	for start := 0; start < n; start += 500 {
		end := min(start+500, n)
		batch := make([]retryq.NewTask, 0, end-start)
		for i := start; i < end; i++ {
			batch = append(batch, retryq.NewTask{Type: taskType, Payload: workloadTask(i)})
		}
		ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
		res, err := client.EnqueueMany(ctx, batch)
		cancel()
		if err != nil {
			c.t.Fatalf("enqueue batch at %d: %v", start, err)
		}
		for j, r := range res {
			c.ids[start+j] = r.Task.ID
		}
	}
}

// finished counts tasks in a terminal state.
func (c *cluster) finished() (int, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	var n int
	err := c.st.Pool().QueryRow(ctx, "SELECT count(*) FROM tasks WHERE state IN ('succeeded', 'dead', 'cancelled')").Scan(&n)
	return n, err
}

// runningOn counts the tasks currently leased by a node's worker.
func (c *cluster) runningOn(node string) (int, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	var n int
	err := c.st.Pool().QueryRow(ctx, "SELECT count(*) FROM tasks WHERE state = 'running' AND worker_id = $1", node+"/w").Scan(&n)
	return n, err
}

// heldBy returns the tasks leased by a node's worker, with their attempt.
func (c *cluster) heldBy(node string) map[string]int {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	rows, err := c.st.Pool().Query(ctx, "SELECT id, attempt FROM tasks WHERE state = 'running' AND worker_id = $1", node+"/w")
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var a int
		if err := rows.Scan(&id, &a); err != nil {
			c.t.Fatal(err)
		}
		out[id] = a
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// waitFinished waits until all n tasks are terminal, failing early if a
// node that was not killed exits.
func (c *cluster) waitFinished(n int, timeout time.Duration) time.Duration {
	c.t.Helper()
	last, lastAt := -1, time.Now()
	return waitFor(c.t, timeout, fmt.Sprintf("all %d tasks finished", n), func() (bool, error) {
		for _, nd := range c.nodes {
			if nd.killed.IsZero() && nd.exited() {
				c.t.Fatalf("node %s exited unexpectedly (%v):\n%s", nd.id, nd.waitErr, c.nodeLog(nd, 4000))
			}
		}
		done, err := c.finished()
		if err != nil {
			return false, err
		}
		if done != last {
			last, lastAt = done, time.Now()
		} else if time.Since(lastAt) > 30*time.Second {
			c.t.Fatalf("no progress for 30s at %d of %d tasks finished", done, n)
		}
		return done == n, nil
	})
}

// warningKinds counts a node's WARN and ERROR log lines by message.
func (c *cluster) warningKinds(n *nodeProc) map[string]int {
	b, _ := os.ReadFile(n.logPath)
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") {
			continue
		}
		msg := l
		if i := strings.Index(l, "msg="); i >= 0 {
			msg = l[i+4:]
			if strings.HasPrefix(msg, `"`) {
				if j := strings.Index(msg[1:], `"`); j >= 0 {
					msg = msg[1 : j+1]
				}
			} else if j := strings.IndexByte(msg, ' '); j >= 0 {
				msg = msg[:j]
			}
		}
		out[msg]++
	}
	return out
}

// countLines counts the lines of a node's log containing all of words.
func (c *cluster) countLines(n *nodeProc, words ...string) int {
	b, _ := os.ReadFile(n.logPath)
	count := 0
	for _, l := range strings.Split(string(b), "\n") {
		ok := true
		for _, w := range words {
			if !strings.Contains(l, w) {
				ok = false
				break
			}
		}
		if ok && l != "" {
			count++
		}
	}
	return count
}
