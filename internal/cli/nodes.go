package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"
)

func init() {
	register(&command{name: "nodes", summary: "list the retryq nodes sharing the database: who is alive and who leads", run: runNodes})
}

const nodesUsage = `Usage: retryq nodes [--since T] [--json]

Lists the retryq server processes that share the server's database, as they
record themselves every few seconds: id, host, version, role (leader,
standby, worker when it runs without the scheduler, or stopped when it
closed cleanly), when each started and was last seen, and whether it is
alive (seen in the last 30 seconds and not stopped). The leader is the node
that holds the leadership lease, whatever the other rows last recorded.
Nodes seen since --since are listed (default: the last hour).
`

// apiNode is one node of GET /v1/nodes.
type apiNode struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	Version   string    `json:"version"`
	Role      string    `json:"role"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	Alive     bool      `json:"alive"`
}

func runNodes(ctx context.Context, env *Env, args []string) int {
	const name = "nodes"
	var cf clientFlags
	var since string
	fs := newFlagSet(name, nodesUsage)
	cf.register(fs, true)
	fs.StringVar(&since, "since", "", "nodes seen at or after this `time`: RFC 3339, or a duration ago such as 24h on the server's clock (default 1h)")
	pos, st, ok := parseArgs(env, fs, args)
	if !ok {
		return st
	}
	if st, ok := wantArgs(env, name, pos, 0, ""); !ok {
		return st
	}
	q := url.Values{}
	var sinceT time.Time
	if since != "" {
		var msg string
		if sinceT, msg = parseSince("--since", since, time.Now()); msg != "" {
			return usageError(env, name, msg)
		}
	}
	c, err := cf.client(env)
	if err != nil {
		return usageError(env, name, err.Error())
	}
	defer c.close()
	if since != "" {
		if isDurationAgo(since) {
			// A duration ago on the server's clock, which the nodes'
			// heartbeats are compared with.
			if sinceT, err = sinceOnServer(ctx, c, since); err != nil {
				return fail(env, name, err)
			}
		}
		q.Set("since", sinceT.UTC().Format(time.RFC3339Nano))
	}
	var out struct {
		Nodes []apiNode `json:"nodes"`
		Now   time.Time `json:"now"` // the registry's clock (absent from older servers)
	}
	raw, err := c.call(ctx, "GET", "/v1/nodes", q, nil, &out)
	if err != nil {
		return fail(env, name, err)
	}
	if cf.json {
		printJSON(env.Stdout, raw)
		return exitOK
	}
	now := c.now()
	if !out.Now.IsZero() {
		// LAST SEEN on the clock the heartbeats were written at, not this
		// machine's, which may be off.
		now = out.Now
	}
	writeNodes(env.Stdout, out.Nodes, now)
	return exitOK
}

func writeNodes(w io.Writer, nodes []apiNode, now time.Time) {
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no nodes seen in that time")
		return
	}
	tb := newTable("ID", "HOST", "VERSION", "ROLE", "STARTED", "LAST SEEN", "ALIVE")
	leaders, standbys := 0, 0
	for _, n := range nodes {
		alive := "no"
		if n.Alive {
			alive = "yes"
			switch n.Role {
			case "leader":
				leaders++
			case "standby":
				standbys++
			}
		}
		tb.add(fitCell(n.ID, 40), fitCell(n.Host, 40), fitCell(n.Version, 48), fitCell(n.Role, 10),
			fmtTime(n.StartedAt), fmtRelTime(n.LastSeen, now), alive)
	}
	tb.write(w)
	switch {
	case leaders > 0:
	case standbys > 0:
		fmt.Fprintln(w, "\nNo alive node holds the leadership. A standby takes it within --leader-ttl and a quarter of it")
		fmt.Fprintln(w, "(12.5 s by default) after the leader's last renewal; until then scheduled tasks and retries wait")
		fmt.Fprintln(w, "to be promoted and expired leases to be reaped.")
	default:
		// Nodes run with --no-scheduler never take the lease: waiting
		// would not help.
		fmt.Fprintln(w, "\nNo alive node can lead: the nodes alive, if any, run with --no-scheduler (role worker). Until a")
		fmt.Fprintln(w, "node without --no-scheduler runs, scheduled tasks and retries are not promoted and expired leases")
		fmt.Fprintln(w, "are not reaped.")
	}
}
