package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/retryq/retryq/internal/engine"
	"github.com/retryq/retryq/retry"
)

// maxTypeTimeout bounds timeout_seconds of a task type (as the engine does).
const maxTypeTimeout = 24 * time.Hour

// typeJSON is the wire form of a task type's configuration.
type typeJSON struct {
	Type           string         `json:"type"`
	Retry          *retry.Policy  `json:"retry"` // null when the stored policy is unreadable
	TimeoutSeconds float64        `json:"timeout_seconds"`
	Priority       int            `json:"priority"`
	Target         *engine.Target `json:"target"`
	UpdatedAt      jsonTime       `json:"updated_at"`
	Stored         bool           `json:"stored"`
	// Unreadable says why this binary cannot decode the stored
	// configuration (a newer version's, say); retry is then null, and
	// target null unless the target itself could be decoded.
	Unreadable string `json:"unreadable,omitempty"`
}

func typeOut(spec engine.TypeSpec, redact bool) typeJSON {
	target := spec.Target
	if redact && target != nil {
		target = redactTarget(target)
	}
	out := typeJSON{
		Type: spec.Type, TimeoutSeconds: durSeconds(spec.Timeout), Priority: spec.Priority, Target: target,
		UpdatedAt: jsonTime(spec.UpdatedAt), Stored: spec.Stored, Unreadable: spec.Unreadable,
	}
	if spec.Unreadable == "" {
		p := spec.Policy.WithDefaults()
		out.Retry = &p
	}
	return out
}

// redactedValue replaces a push target's secrets in what a read-only token
// is shown.
const redactedValue = "REDACTED"

// redactTarget returns a copy of t without its secrets: every header value
// (headers carry the downstream's API keys and Authorization) and the
// password of the URL's user information. A read-only token may see how a
// type is delivered, not the credentials it is delivered with.
func redactTarget(t *engine.Target) *engine.Target {
	c := *t
	c.URL = engine.RedactURL(t.URL, redactedValue)
	if len(t.Headers) > 0 {
		c.Headers = make(map[string]string, len(t.Headers))
		for k := range t.Headers {
			c.Headers[k] = redactedValue
		}
	}
	return &c
}

// redactFor reports whether the request's token is read-only, so that the
// type configurations it is answered with leave out the targets' secrets.
func (s *server) redactFor(r *http.Request) bool {
	return s.auth.Enabled() && s.auth.Check(r) == AccessRead
}

// typeBody is the body of PUT /v1/types/{type}.
type typeBody struct {
	Retry          json.RawMessage `json:"retry"`
	TimeoutSeconds *float64        `json:"timeout_seconds"`
	Priority       int             `json:"priority"`
	Target         json.RawMessage `json:"target"` // an engine.Target, decoded apart so errors name "target.<field>"
}

// spec converts the body into a TypeSpec, validating the policy so that
// errors name the field inside "retry".
func (b *typeBody) spec(typ string) (engine.TypeSpec, error) {
	spec := engine.TypeSpec{Type: typ, Priority: b.Priority}
	if !isNull(b.Target) {
		spec.Target = new(engine.Target)
		if err := decodeJSON(b.Target, spec.Target, "target."); err != nil {
			return spec, err
		}
	}
	if len(b.Retry) > 0 {
		if err := json.Unmarshal(b.Retry, &spec.Policy); err != nil {
			return spec, policyError("retry", err)
		}
	}
	if err := engine.ValidateTypePolicy(spec.Policy); err != nil {
		return spec, policyError("retry", err)
	}
	var err error
	if spec.Timeout, err = optSeconds("timeout_seconds", b.TimeoutSeconds, maxTypeTimeout); err != nil {
		return spec, err
	}
	return spec, nil
}

// listTypes handles GET /v1/types: every stored type configuration.
func (s *server) listTypes(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	specs, err := s.e.ListTypes(r.Context())
	if err != nil {
		return err
	}
	out, redact := make([]typeJSON, len(specs)), s.redactFor(r)
	for i, sp := range specs {
		out[i] = typeOut(sp, redact)
	}
	writeJSON(w, http.StatusOK, map[string]any{"types": out})
	return nil
}

// getType handles GET /v1/types/{type}: the stored configuration, which
// is the defaults (stored false) for a type never configured. It is read
// from the store, as GET /v1/types is, not from this node's cache, which
// may be a few seconds behind a change made through another node.
func (s *server) getType(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	spec, err := s.e.StoredTypeSpec(r.Context(), r.PathValue("type"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, typeOut(spec, s.redactFor(r)))
	return nil
}

// putType handles PUT /v1/types/{type}: stores (replaces) the configuration.
func (s *server) putType(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	typ := r.PathValue("type")
	if err := engine.ValidateType("type", typ); err != nil {
		return err
	}
	var b typeBody
	if err := s.readBody(w, r, &b, false); err != nil {
		return err
	}
	spec, err := b.spec(typ)
	if err != nil {
		return err
	}
	saved, err := s.e.PutType(r.Context(), spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, typeOut(saved, false))
	return nil
}
