package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A session opened while the server refused writes (a standby, a primary
// demoted by a failover, default_transaction_read_only set for
// maintenance) goes on refusing them once the server accepts them again:
// the setting is read when the session starts, and a session still on a
// standby that was not promoted never will. Kept in the pool, such
// sessions failed every write for up to the pool's connection lifetime (an
// hour) after the cause was gone. So a session that refuses a write, or
// that Ping finds read-only, is marked, and the pool closes it instead of
// handing it out again; the next call gets another session.

// readOnlyKey marks a session in its CustomData.
const readOnlyKey = "retryq.read_only"

// markReadOnly marks c to be closed instead of handed out again.
func markReadOnly(c *pgx.Conn) {
	if c != nil {
		c.PgConn().CustomData()[readOnlyKey] = true
	}
}

// keepConn is the pool's PrepareConn: a marked session is closed before
// it is handed out, and the pool hands out another. (AfterRelease would
// run every release of the pool in a goroutine of its own.)
func keepConn(_ context.Context, c *pgx.Conn) (bool, error) {
	marked, _ := c.PgConn().CustomData()[readOnlyKey].(bool)
	return !marked, nil
}

// isReadOnlyErr reports a statement refused by a read-only transaction.
func isReadOnlyErr(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006" // read_only_sql_transaction
}

// readOnlyTracer marks the sessions whose statements the server refused
// as read-only, chaining to the tracer the URL's configuration set, if any.
type readOnlyTracer struct{ next pgx.QueryTracer }

var (
	_ pgx.QueryTracer = readOnlyTracer{}
	_ pgx.BatchTracer = readOnlyTracer{}
)

// TraceQueryStart implements pgx.QueryTracer.
func (t readOnlyTracer) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if t.next != nil {
		return t.next.TraceQueryStart(ctx, c, d)
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t readOnlyTracer) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	if isReadOnlyErr(d.Err) {
		markReadOnly(c)
	}
	if t.next != nil {
		t.next.TraceQueryEnd(ctx, c, d)
	}
}

// TraceBatchStart implements pgx.BatchTracer.
func (t readOnlyTracer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if bt, ok := t.next.(pgx.BatchTracer); ok {
		return bt.TraceBatchStart(ctx, c, d)
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t readOnlyTracer) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	if isReadOnlyErr(d.Err) {
		markReadOnly(c)
	}
	if bt, ok := t.next.(pgx.BatchTracer); ok {
		bt.TraceBatchQuery(ctx, c, d)
	}
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t readOnlyTracer) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	if isReadOnlyErr(d.Err) {
		markReadOnly(c)
	}
	if bt, ok := t.next.(pgx.BatchTracer); ok {
		bt.TraceBatchEnd(ctx, c, d)
	}
}
