package api

import (
	"net/http"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/store"
)

// maxErrorCodeLen bounds error_code filters: the longest code the engine
// records.
const maxErrorCodeLen = engine.MaxErrorCodeLen

// listDead handles GET /v1/dlq: dead tasks, newest first.
func (s *server) listDead(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "type", "error_code", "no_error_code", "reason", "since", "limit", "cursor")
	if err != nil {
		return err
	}
	var f store.DeadFilter
	if f.Type, err = q.typ(); err != nil {
		return err
	}
	if f.ErrorCode, err = q.text("error_code", maxErrorCodeLen); err != nil {
		return err
	}
	if f.NoErrorCode, err = q.boolean("no_error_code"); err != nil {
		return err
	}
	if f.Reason, err = q.reason(); err != nil {
		return err
	}
	if f.Since, err = q.time("since"); err != nil {
		return err
	}
	if f.Limit, err = q.limit(); err != nil {
		return err
	}
	if f.Cursor, err = q.cursor(); err != nil {
		return err
	}
	ts, next, err := s.e.ListDead(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.page(r.Context(), ts, next))
	return nil
}

// deadGroupJSON is one row of the DLQ summary.
type deadGroupJSON struct {
	Type      string   `json:"type"`
	ErrorCode string   `json:"error_code"`
	Reason    string   `json:"reason"`
	Count     int      `json:"count"`
	Oldest    jsonTime `json:"oldest"`
	Newest    jsonTime `json:"newest"`
}

// deadSummary handles GET /v1/dlq/summary: dead tasks grouped by type,
// error code and reason, largest group first. The filter parameters are
// those of GET /v1/dlq, so a summary counts what a redrive or purge with
// the same filter takes; limit bounds the groups returned (error codes are
// whatever workers report), and total and group_count count them all.
func (s *server) deadSummary(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "type", "error_code", "no_error_code", "reason", "since", "limit")
	if err != nil {
		return err
	}
	var p store.SummaryParams
	if p.Type, err = q.typ(); err != nil {
		return err
	}
	if p.ErrorCode, err = q.text("error_code", maxErrorCodeLen); err != nil {
		return err
	}
	if p.NoErrorCode, err = q.boolean("no_error_code"); err != nil {
		return err
	}
	if p.Reason, err = q.reason(); err != nil {
		return err
	}
	if p.Since, err = q.time("since"); err != nil {
		return err
	}
	if p.Limit, err = q.limit(); err != nil {
		return err
	}
	sum, err := s.e.DeadSummary(r.Context(), p)
	if err != nil {
		return err
	}
	out := struct {
		Groups     []deadGroupJSON `json:"groups"`
		Total      int             `json:"total"`
		GroupCount int             `json:"group_count"`
	}{Groups: make([]deadGroupJSON, len(sum.Groups)), Total: sum.TaskCount, GroupCount: sum.GroupCount}
	for i, g := range sum.Groups {
		out.Groups[i] = deadGroupJSON{Type: g.Type, ErrorCode: g.ErrorCode, Reason: g.Reason, Count: g.Count,
			Oldest: jsonTime(g.Oldest), Newest: jsonTime(g.Newest)}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// dlqFilterBody selects dead tasks for redrive and purge. Empty fields do
// not filter: an empty body selects every dead task. An "ids" list given
// empty is refused (by the engine, as no_error_code with error_code is)
// rather than read as no filter: a client whose list of ids came out empty
// must not redrive or purge the whole DLQ.
//
// type, error_code and ids are compared byte for byte: they must be valid
// Unicode as sent (text), as the query parameters of GET /v1/dlq are.
type dlqFilterBody struct {
	Type        text    `json:"type"`
	ErrorCode   text    `json:"error_code"`
	NoErrorCode bool    `json:"no_error_code"`
	Reason      string  `json:"reason"`
	Since       *string `json:"since"`
	IDs         []text  `json:"ids"`
	Limit       int     `json:"limit"`
	// OlderThanSeconds is for purge only; redrive refuses it as unknown.
	// It is a member here rather than in a struct embedding this one,
	// whose decoding errors would name the field "dlqFilterBody.limit".
	OlderThanSeconds *float64 `json:"older_than_seconds"`
}

func (b *dlqFilterBody) filter() (store.DeadFilter, error) {
	f := store.DeadFilter{Type: string(b.Type), ErrorCode: string(b.ErrorCode), NoErrorCode: b.NoErrorCode, Limit: b.Limit}
	if b.IDs != nil {
		f.IDs = make([]string, len(b.IDs))
		for i, id := range b.IDs {
			f.IDs[i] = string(id)
		}
	}
	var err error
	if b.Type != "" {
		if err := engine.ValidateType("type", f.Type); err != nil {
			return f, err
		}
	}
	if len(b.ErrorCode) > maxErrorCodeLen {
		return f, fieldError("error_code", "is longer than %d bytes", maxErrorCodeLen)
	}
	if f.Reason, err = checkReason("reason", b.Reason); err != nil {
		return f, err
	}
	if b.Since != nil {
		if f.Since, err = parseTime("since", *b.Since); err != nil {
			return f, err
		}
	}
	if b.Limit < 0 {
		return f, fieldError("limit", "must not be negative (0 means no limit)")
	}
	return f, nil
}

// redrive handles POST /v1/dlq/redrive.
func (s *server) redrive(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	var b dlqFilterBody
	if err := s.readBody(w, r, &b, true); err != nil {
		return err
	}
	if b.OlderThanSeconds != nil {
		return fieldError("older_than_seconds", "unknown field")
	}
	f, err := b.filter()
	if err != nil {
		return err
	}
	n, err := s.e.Redrive(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"redriven": n})
	return nil
}

// purge handles POST /v1/dlq/purge.
func (s *server) purge(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	var b dlqFilterBody
	if err := s.readBody(w, r, &b, true); err != nil {
		return err
	}
	f, err := b.filter()
	if err != nil {
		return err
	}
	older, err := optSeconds("older_than_seconds", b.OlderThanSeconds, maxDelay)
	if err != nil {
		return err
	}
	if b.OlderThanSeconds != nil {
		f.Before = s.now().Add(-older)
	}
	n, err := s.e.Purge(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
	return nil
}
