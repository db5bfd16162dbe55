package postgres

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/retryq/retryq/store"
)

// cancelPrefix starts the payload of the notification CancelTask sends for
// a running task: "cancel N IDLEASE", where N is the byte length of the
// task id, so that ids and lease ids holding spaces read back whole
// (cancelPayload, publishCancel). Other notifications carry an empty
// payload and mean "tasks may be due".
const cancelPrefix = "cancel "

// duePrefix starts the payload of the notification an insert sends for
// the tasks it made due: "due " and then, for each distinct type, its byte
// length, a space and its name (duePayload), so that a name holding
// spaces reads back whole. An empty payload stands for any type.
const duePrefix = "due "

// maxDueNotifyTypes bounds the types one insert's notification names:
// past it, the notification names none (any type).
const maxDueNotifyTypes = 8

// duePayload returns the payload of the wake-up for the rows of parts
// that an insert makes due (not leased at insert): their types, or "" (any
// type) past maxDueNotifyTypes types or maxNotifyPayload bytes.
func duePayload(parts ...insertRows) string {
	var buf [maxDueNotifyTypes]string
	types := buf[:0]
	size := len(duePrefix)
	for _, r := range parts {
		for i := range r {
			if r[i].state == string(store.StateRunning) || slices.Contains(types, r[i].typ) {
				continue
			}
			if len(types) == maxDueNotifyTypes {
				return ""
			}
			types = append(types, r[i].typ)
			size += len(r[i].typ) + 4
		}
	}
	if len(types) == 0 || size > maxNotifyPayload {
		return ""
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(duePrefix)
	for _, t := range types {
		b.WriteString(strconv.Itoa(len(t)))
		b.WriteByte(' ')
		b.WriteString(t)
	}
	if b.Len() > maxNotifyPayload {
		return ""
	}
	return b.String()
}

// parseDuePayload returns the types a wake-up's payload names, and false
// (nil: any type) for a payload that names none or does not parse.
func parseDuePayload(p string) ([]string, bool) {
	rest, ok := strings.CutPrefix(p, duePrefix)
	if !ok {
		return nil, false
	}
	var types []string
	for rest != "" {
		n, after, ok := strings.Cut(rest, " ")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size <= 0 || size > len(after) || len(types) == maxDueNotifyTypes {
			return nil, false
		}
		types = append(types, after[:size])
		rest = after[size:]
	}
	return types, len(types) > 0
}

// maxNotifyPayload is PostgreSQL's bound on a NOTIFY payload (8000 bytes,
// exclusive).
const maxNotifyPayload = 7999

// cancelPayload returns the notification payload naming the lease to stop,
// and false when it would exceed maxNotifyPayload. The notification is best
// effort either way: a handler not told stops at its next heartbeat, which
// finds the lease gone.
func cancelPayload(id, lease string) (string, bool) {
	p := cancelPrefix + strconv.Itoa(len(id)) + " " + id + lease
	return p, len(p) <= maxNotifyPayload
}

// cancelBuffer is how many cancellations a slow receiver may fall behind
// before more are dropped (its heartbeat then finds the lease gone).
const cancelBuffer = 64

// Cancellations implements store.CancelNotifier: the listener started by
// Wakeups delivers the cancellations other processes (and this one)
// notify. With Config.PollOnly nothing arrives.
func (s *Store) Cancellations(ctx context.Context) <-chan store.LeaseRef {
	ch := make(chan store.LeaseRef, cancelBuffer)
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if ctx == nil || s.closed.Load() { // a nil context is refused: closed at once
		close(ch)
		return ch
	}
	s.cancelMu.Lock()
	if s.cancelSubs == nil {
		s.cancelSubs = make(map[chan store.LeaseRef]struct{})
	}
	s.cancelSubs[ch] = struct{}{}
	s.cancelMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.bgCtx, cancel)
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		defer stop()
		<-ctx.Done()
		s.cancelMu.Lock()
		delete(s.cancelSubs, ch)
		close(ch)
		s.cancelMu.Unlock()
	}()
	return ch
}

// publishCancel hands a cancellation notification to every receiver.
func (s *Store) publishCancel(payload string) {
	n, rest, ok := strings.Cut(strings.TrimPrefix(payload, cancelPrefix), " ")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size <= 0 || size >= len(rest) {
		return
	}
	id, lease := rest[:size], rest[size:]
	ref := store.LeaseRef{TaskID: id, LeaseID: lease}
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	for ch := range s.cancelSubs {
		select {
		case ch <- ref:
		default:
		}
	}
}

// Wakeups returns a channel receiving a value whenever some process
// inserted, promoted or released tasks in the store's schema (NOTIFY on
// the schema's channel, see the package documentation). Values coalesce:
// one pending value stands for any number of notifications.
//
// The listener holds one dedicated connection outside the pool. When it
// drops, it reconnects with exponential backoff (Config.ReconnectMin..Max,
// with jitter) and sends a wakeup after every reconnect, since notifications
// sent meanwhile are lost. The channel is closed when ctx is done or the
// store is closed. With Config.PollOnly it never fires.
func (s *Store) Wakeups(ctx context.Context) <-chan struct{} {
	return s.wakeups(ctx, nil)
}

// TypedWakeups implements store.TypedNotifier: Wakeups, and for each
// notification the types it names, recorded in the returned DueTypes
// before the value is sent. An insert names the types of the tasks it
// made due (duePayload); other notifications, and the wake-up after a
// reconnect, name none: any type.
func (s *Store) TypedWakeups(ctx context.Context) (<-chan struct{}, *store.DueTypes) {
	due := &store.DueTypes{}
	return s.wakeups(ctx, due), due
}

// wakeups starts a listener delivering to a new channel, recording each
// notification's types in due unless due is nil.
func (s *Store) wakeups(ctx context.Context, due *store.DueTypes) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if ctx == nil || s.closed.Load() { // a nil context is refused: closed at once
		close(ch)
		return ch
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.bgCtx, cancel)
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		defer close(ch)
		defer stop()
		defer cancel()
		if s.cfg.PollOnly {
			<-ctx.Done()
			return
		}
		s.listen(ctx, ch, due)
	}()
	return ch
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// listen runs the LISTEN loop until ctx is done. Every (re)connection
// wakes the fetchers once, since notifications sent while nobody listened
// are lost. A connection that drops before it has lasted ReconnectMax
// counts as a failed attempt: the next one waits out the backoff, so a
// server that accepts connections and then drops them is not hammered.
//
// An outage is logged once: a warning when it starts (the first failure
// after a connection that lasted ReconnectMax, or at the start), one Info
// line at the first reconnect, and the attempts in between at Debug. A
// warning per attempt made every node log a line per ReconnectMax for as
// long as the database stayed away.
func (s *Store) listen(ctx context.Context, ch chan struct{}, due *store.DueTypes) {
	log := s.cfg.Logger
	backoff := s.cfg.ReconnectMin
	var (
		down     time.Time // when the current outage started; zero: none
		attempts int       // failed attempts in the current outage
		back     bool      // the outage's first reconnect was logged
	)
	// retry waits out the backoff (with jitter) and doubles it; false when
	// ctx ended meanwhile.
	retry := func(msg string, err error) bool {
		wait := backoff/2 + rand.N(backoff/2+1)
		attempts++
		if down.IsZero() {
			down = time.Now()
			log.Warn(msg, "err", err, "retry_in", wait)
		} else {
			log.Debug(msg, "err", err, "retry_in", wait, "attempts", attempts)
		}
		backoff = min(backoff*2, s.cfg.ReconnectMax)
		return sleep(ctx, wait)
	}
	for ctx.Err() == nil {
		conn, err := s.listenConn(ctx)
		if err != nil {
			if ctx.Err() != nil || !retry("retryq postgres: wakeup listener cannot connect", err) {
				return
			}
			continue
		}
		if !down.IsZero() && !back {
			back = true
			log.Info("retryq postgres: wakeup listener reconnected",
				"outage", time.Since(down).Round(time.Millisecond), "attempts", attempts)
		}
		if due != nil {
			due.Add(nil) // what was sent meanwhile is lost: any type
		}
		signal(ch)
		up := time.Now()
		err = s.waitLoop(ctx, conn, ch, due)
		closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		if time.Since(up) >= s.cfg.ReconnectMax {
			// The connection lasted: the outage, if any, is over, and
			// this drop starts a new one.
			backoff, down, attempts, back = s.cfg.ReconnectMin, time.Now(), 1, false
			log.Warn("retryq postgres: wakeup listener connection lost", "err", err)
			continue
		}
		if !retry("retryq postgres: wakeup listener connection lost soon after connecting", err) {
			return
		}
	}
}

// listenSessionSQL turns off, for the listener's session only, the idle
// timeout an operator may set on the database or role (idle_session_timeout,
// PostgreSQL 14 and later; older servers do not know it, and the WHERE
// clause keeps them from being asked). The listener's session is idle by
// design between its pings: with such a timeout the server ended it every
// time the timeout passed, each time losing the notifications sent until
// the listener was back and logging a warning, and a timeout shorter than
// ReconnectMax kept the listener away most of the time.
const listenSessionSQL = `SELECT set_config('idle_session_timeout', '0', false)
WHERE current_setting('server_version_num')::int >= 140000`

// listenConn connects the listener and sets its session up. The setup is
// bounded by the connect timeout, as the connection is: a network path cut
// silently before a reply (no reset, the peer just goes quiet) used to
// keep the listener waiting for that reply until the store closed, with no
// wake-ups meanwhile; waitLoop's pings only watch a connection set up.
func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = s.cfg.ConnectTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) (*pgx.Conn, error) {
		closeConn(conn)
		return nil, err
	}
	if _, err := conn.Exec(ctx, listenSessionSQL); err != nil {
		return fail(err)
	}
	// The channel is read on this connection: its search_path is the
	// pool's, so it names the schema the store's statements notify for.
	var channel string
	if err := conn.QueryRow(ctx, "SELECT "+notifyChannelSQL).Scan(&channel); err != nil {
		return fail(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fail(err)
	}
	return conn, nil
}

// closeConn closes the listener's connection, waiting a second at most
// for a path that may be cut.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// listenPingInterval is how long the listener waits for a notification
// before checking that its connection is still alive (a silently dropped
// connection would otherwise block it forever).
var listenPingInterval = 30 * time.Second

func (s *Store) waitLoop(ctx context.Context, conn *pgx.Conn, ch chan struct{}, due *store.DueTypes) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPingInterval)
		n, err := conn.WaitForNotification(wctx)
		timedOut := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil && strings.HasPrefix(n.Payload, cancelPrefix):
			s.publishCancel(n.Payload)
		case err == nil:
			if due != nil {
				types, _ := parseDuePayload(n.Payload) // nil: any type
				due.Add(types)
			}
			signal(ch)
		case ctx.Err() != nil:
			return ctx.Err()
		case timedOut:
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
