package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryq/retryq/retry"
	"github.com/retryq/retryq/store"
)

// typeCacheTTL is how long a cached type configuration is served as it
// stands; an older one is read again.
const typeCacheTTL = 5 * time.Second

// typeCacheMaxStale bounds how stale another node's view of a type may be:
// an entry older than typeCacheTTL is served while one background read
// replaces it only up to this age (a type in steady use never gets there).
// An older entry (a type this node has not used for a while) is read again
// before it is used, so that the first attempt after a quiet spell is not
// run and decided under a configuration that changed long ago.
const typeCacheMaxStale = 2 * typeCacheTTL

// typeCacheMaxEntries is the size from which the cache drops the entries
// of types not used for longer than typeCacheMaxStale (which would be read
// again before use anyway), so that the names of types that come and go,
// or are only looked up, are not kept for as long as the process runs.
// The next sweep waits until the cache has doubled, or reached this size
// again, or, while it holds more than this, until typeCacheMaxStale has
// passed (the reads of the types still in use run it): the cache holds at
// most about twice the types used recently, and a burst of names is
// dropped once unused even when the cache never grows again.
const typeCacheMaxEntries = 1024

// typeStaleWait bounds a caller's wait for the read of an entry past
// typeCacheMaxStale: when the database does not answer by then, the last
// known configuration is served, as when the read fails.
const typeStaleWait = time.Second

// Target is a push target: the engine delivers tasks of the type itself by
// HTTP instead of handing them to workers.
type Target struct {
	URL            string            `json:"url"`
	Method         string            `json:"method,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	Concurrency    int               `json:"concurrency,omitempty"`
}

// Validate checks a target and names the offending field.
func (t *Target) Validate() error {
	u, err := url.Parse(t.URL)
	if t.URL == "" {
		return fieldErr("target.url", "is required")
	}
	// The URL is quoted with its secrets masked (redactURL): the error of
	// a stored target is logged by the pusher (badTargetLog).
	if err != nil {
		return fieldErr("target.url", "must be an absolute http or https URL (it does not parse as a URL)")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldErr("target.url", "must be an absolute http or https URL (got %q)", redactURL(t.URL))
	}
	if u.Hostname() == "" {
		// "http://:8080/": net/http would dial the local machine.
		return fieldErr("target.url", "must name a host (got %q)", redactURL(t.URL))
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits; the dial of every delivery would
		// fail on them.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fieldErr("target.url", "has port %s, want 1 to 65535", p)
		}
	}
	switch t.Method {
	case "", "POST", "PUT", "PATCH", "GET", "DELETE":
	default:
		return fieldErr("target.method", "must be one of POST, PUT, PATCH, GET, DELETE (got %q)", t.Method)
	}
	if t.TimeoutSeconds < 0 || t.TimeoutSeconds > 3600 || (t.TimeoutSeconds > 0 && t.TimeoutSeconds < 0.001) {
		return fieldErr("target.timeout_seconds", "must be 0 (the type's timeout, else the default) or between 0.001 and 3600 (got %g)", t.TimeoutSeconds)
	}
	if t.Concurrency < 0 || t.Concurrency > 1000 {
		return fieldErr("target.concurrency", "must be between 0 and 1000 (got %d)", t.Concurrency)
	}
	seen := make(map[string]string, len(t.Headers))
	for _, name := range slices.Sorted(maps.Keys(t.Headers)) {
		if err := checkTargetHeader(name, t.Headers[name]); err != nil {
			return err
		}
		// Header names are case-insensitive: two spellings of one name
		// would each be sent with whichever value the map's order gave
		// last, which may differ from node to node and run to run.
		canon := http.CanonicalHeaderKey(name)
		if other, dup := seen[canon]; dup {
			return fieldErr(fmt.Sprintf("target.headers[%q]", name), "is the same header as %q (names are case-insensitive)", other)
		}
		seen[canon] = name
	}
	return nil
}

// checkTargetHeader refuses a header that no request could carry (a name
// that is not an HTTP token, a value with control characters: every
// delivery would fail) or that retryq sets itself or must not let a target
// set (the Retryq-* protocol headers, framing headers, and the idempotency
// headers that would let net/http resend a delivery on its own).
func checkTargetHeader(name, value string) error {
	field := fmt.Sprintf("target.headers[%q]", name)
	if name == "" {
		return fieldErr("target.headers", "has an empty header name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return fieldErr(field, "is not a valid header name")
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return fieldErr(field, "has a control character in its value")
		}
	}
	switch canon := http.CanonicalHeaderKey(name); {
	case strings.HasPrefix(canon, "Retryq-"):
		return fieldErr(field, "is set by retryq itself")
	case canon == "Content-Length" || canon == "Transfer-Encoding" || canon == "Connection",
		canon == "Idempotency-Key" || canon == "X-Idempotency-Key",
		// Hop-by-hop headers belong to one connection, not to the
		// request: HTTP/2 refuses or drops them, so an https target would
		// fail every delivery or never see them.
		canon == "Upgrade" || canon == "Keep-Alive" || canon == "Proxy-Connection" || canon == "Te" || canon == "Trailer":
		return fieldErr(field, "cannot be set on a push target")
	case canon == "Host" && !validHostValue(value):
		// net/http sends an empty Host instead of one outside the host
		// grammar (HTTP/1), or fails the request (HTTP/2).
		return fieldErr(field, "must be a host name with an optional port (got %q)", value)
	}
	return nil
}

// validHostValue reports whether v is a Host header net/http sends as it
// is: not empty, and its ASCII bytes those of a host and port (letters,
// digits, the unreserved and sub-delimiter characters, ':' and the
// brackets of an IPv6 address). Other bytes are a host name's non-ASCII
// letters, which net/http sends in their IDNA form (or fails on).
func validHostValue(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 0x80 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) < 0 {
			return false
		}
	}
	return true
}

// TypeSpec is a task type's configuration in its decoded form.
type TypeSpec struct {
	Type     string
	Policy   retry.Policy
	Timeout  time.Duration
	Priority int
	Target   *Target
	// Stored reports whether the type has a stored configuration (false:
	// defaults for an unknown type).
	Stored    bool
	UpdatedAt time.Time
	// Unreadable, set only by ListTypes and StoredTypeSpec, says why the
	// stored configuration cannot be decoded by this binary (a newer
	// version's policy field during a rolling upgrade, say). Policy is
	// then the default, not what is stored, and Target is the stored one
	// only if it decoded. Tasks of such a type are held back
	// (see holdBack), never run under the defaults.
	Unreadable string
}

type typeEntry struct {
	spec   TypeSpec
	loaded time.Time
	// used is when the entry was last asked for past typeCacheTTL (the
	// ask that starts a load; a younger entry is in use by its age
	// alone), so that the sweep keeps a type in use whose reads fail.
	// Guarded by typeCache.mu.
	used time.Time
}

// typeCache holds the types' configurations read from the store. An entry
// older than typeCacheTTL (up to typeCacheMaxStale) is still served while
// one background load replaces it, so the hot paths (enqueue, handler
// start) of a type in use never wait for the database, and a refresh is one
// query per type however many callers ask at that moment. Only the first
// use of a type, and the first after it went unused past
// typeCacheMaxStale, waits (the latter at most typeStaleWait), and
// concurrent uses share one load. Once the cache is large
// (typeCacheMaxEntries), the entries of types unused for
// typeCacheMaxStale are dropped.
type typeCache struct {
	e       *Engine
	mu      sync.RWMutex
	m       map[string]*typeEntry
	loading map[string]*typeLoad
	sweepAt int       // the size of m at which the next sweep runs
	sweptAt time.Time // the last sweep: one runs again typeCacheMaxStale later while m is large
}

// typeLoad is one load of a type in flight; done closes when ent or err is set.
type typeLoad struct {
	done chan struct{}
	ent  *typeEntry
	err  error
}

// typeLoadTimeout bounds one load, which runs apart from any caller's
// context so that a caller giving up does not fail the others.
const typeLoadTimeout = 10 * time.Second

func newTypeCache(e *Engine) *typeCache {
	return &typeCache{e: e, m: make(map[string]*typeEntry), loading: make(map[string]*typeLoad), sweepAt: typeCacheMaxEntries}
}

// sweep drops the entries neither read again nor asked for over
// typeCacheMaxStale: their types have not been used for a while. An entry
// whose reads fail (the last known configuration) is kept while its type
// is in use. c.mu is held.
func (c *typeCache) sweep(now time.Time) {
	for typ, ent := range c.m {
		if now.Sub(ent.loaded) >= typeCacheMaxStale && now.Sub(ent.used) >= typeCacheMaxStale {
			delete(c.m, typ)
		}
	}
	c.sweepAt = max(typeCacheMaxEntries, 2*len(c.m))
	c.sweptAt = now
}

func (c *typeCache) get(ctx context.Context, typ string) (*typeEntry, error) {
	now := time.Now()
	c.mu.RLock()
	ent := c.m[typ]
	c.mu.RUnlock()
	if ent != nil && now.Sub(ent.loaded) < typeCacheTTL {
		return ent, nil
	}
	c.mu.Lock()
	ent = c.m[typ] // a load may have finished meanwhile
	if ent != nil && now.Sub(ent.loaded) < typeCacheTTL {
		c.mu.Unlock()
		return ent, nil
	}
	if ent != nil {
		ent.used = now
	}
	ld := c.loading[typ]
	if ld == nil {
		ld = &typeLoad{done: make(chan struct{})}
		c.loading[typ] = ld
		go c.load(context.WithoutCancel(ctx), typ, ld)
	}
	c.mu.Unlock()
	if ent != nil && now.Sub(ent.loaded) < typeCacheMaxStale {
		return ent, nil // stale: serve it while the load replaces it
	}
	if ent != nil {
		// Too stale to serve unread, but known: wait a little for the
		// read, and serve the last known entry if it fails or hangs.
		t := time.NewTimer(typeStaleWait)
		defer t.Stop()
		select {
		case <-ld.done:
			if ld.err == nil && ld.ent != nil {
				return ld.ent, nil
			}
		case <-t.C:
		case <-ctx.Done():
		}
		return ent, nil
	}
	select {
	case <-ld.done:
		return ld.ent, ld.err
	case <-ctx.Done():
		return nil, fmt.Errorf("load type %s: %w", typ, ctx.Err())
	}
}

// load reads typ from the store and, unless the type was invalidated
// meanwhile, caches it. A failed load keeps the last known entry (served
// while the database is away) and is retried by the next get.
func (c *typeCache) load(ctx context.Context, typ string, ld *typeLoad) {
	ctx, cancel := context.WithTimeout(ctx, typeLoadTimeout)
	defer cancel()
	started := time.Now()
	spec, err := c.e.loadType(ctx, typ)
	c.mu.Lock()
	defer c.mu.Unlock()
	current := c.loading[typ] == ld
	if current {
		delete(c.loading, typ)
	}
	if err != nil {
		ld.err = err
		if old := c.m[typ]; old != nil {
			ld.ent, ld.err = old, nil
		}
	} else {
		ld.ent = &typeEntry{spec: spec, loaded: started}
		if current {
			c.m[typ] = ld.ent
			now := time.Now()
			if len(c.m) >= c.sweepAt || (len(c.m) > typeCacheMaxEntries && now.Sub(c.sweptAt) >= typeCacheMaxStale) {
				c.sweep(now)
			}
		}
	}
	close(ld.done)
}

// invalidate drops typ's entry and disowns a load in flight (which may
// have read the configuration before the change): the next get loads anew.
func (c *typeCache) invalidate(typ string) {
	c.mu.Lock()
	delete(c.m, typ)
	delete(c.loading, typ)
	c.mu.Unlock()
}

// unreadableTypeDelay is how long a task whose type's configuration cannot
// be read waits, given back, before it is leased again (holdBack).
const unreadableTypeDelay = 10 * time.Second

// decidingSpec returns the configuration under which an attempt of a task
// of typ is run and decided: the stored one as this node's cache holds it
// (the last known one while a reload fails). It never falls back to the
// engine defaults, which could dead-letter or retry the task under the
// wrong max attempts, error lists or timeout: when the configuration cannot
// be read (the database is away, or it does not decode, as one written by
// a newer version during a rolling upgrade) and this node knows no earlier
// copy, it returns the error, and the caller decides nothing. Every path
// that runs or decides an attempt (handlers, push deliveries, pull reports,
// the reaper) asks here.
func (e *Engine) decidingSpec(ctx context.Context, typ string) (TypeSpec, error) {
	ent, err := e.types.get(ctx, typ)
	if err != nil {
		return TypeSpec{}, fmt.Errorf("read configuration of type %s: %w", typ, err)
	}
	return ent.spec, nil
}

// decisionSpec returns the configuration under which an attempt that ran
// under started (its decidingSpec when it began) is decided: the type's as
// it stands when the attempt ended, so that a change made while it ran
// (a limit raised or an error code listed during an outage, whose attempts
// hang until their timeout) applies to it as to every later attempt; or
// started when the configuration cannot be read now.
func (e *Engine) decisionSpec(ctx context.Context, typ string, started *TypeSpec) *TypeSpec {
	if spec, err := e.decidingSpec(ctx, typ); err == nil {
		return &spec
	}
	return started
}

// holdBack is the outcome of an attempt that decidingSpec could not give a
// configuration for: a delayed release. The lease is given back, the
// attempt not counted and nothing recorded in the history, and the task
// waits (retry_waiting) for unreadableTypeDelay before it is leased again,
// so that it neither loops hot nor is decided under a policy not its own.
func (e *Engine) holdBack(t *store.Task, err error) store.Outcome {
	e.log.Warn("attempt held back: type configuration unavailable", "task_id", t.ID, "type", t.Type,
		"attempt", t.Attempt, "retry_in", unreadableTypeDelay, "err", err)
	return store.Outcome{TaskID: t.ID, LeaseID: t.LeaseID, State: store.StatePending, RunAt: e.now().Add(unreadableTypeDelay)}
}

func (e *Engine) defaultSpec(typ string) TypeSpec {
	return TypeSpec{Type: typ, Policy: e.cfg.DefaultPolicy, Timeout: e.cfg.DefaultTimeout}
}

func (e *Engine) loadType(ctx context.Context, typ string) (TypeSpec, error) {
	tc, err := e.st.GetType(ctx, typ)
	if errors.Is(err, store.ErrNotFound) {
		return e.defaultSpec(typ), nil
	}
	if err != nil {
		return TypeSpec{}, fmt.Errorf("load type %s: %w", typ, err)
	}
	return e.decodeType(tc)
}

func (e *Engine) decodeType(tc store.TypeConfig) (TypeSpec, error) {
	spec := e.defaultSpec(tc.Type)
	spec.Stored = true
	spec.UpdatedAt = tc.UpdatedAt
	spec.Priority = tc.Priority
	if tc.Timeout > 0 {
		spec.Timeout = tc.Timeout
	}
	// The target first, so that a spec whose policy cannot be decoded
	// still carries it (StoredTypeSpec, StoredTarget).
	t, err := decodeTarget(tc)
	if err != nil {
		return spec, err
	}
	spec.Target = t
	if len(bytes.TrimSpace(tc.Policy)) > 0 && string(bytes.TrimSpace(tc.Policy)) != "null" {
		var p retry.Policy
		if err := json.Unmarshal(tc.Policy, &p); err != nil {
			return spec, fmt.Errorf("decode policy of type %s: %w", tc.Type, err)
		}
		// A zero policy ({}, stored when only the timeout or priority was
		// set) means "the defaults", which for the engine are its
		// DefaultPolicy, as for a type never configured.
		if !isZeroPolicy(p) {
			spec.Policy = p.WithDefaults()
		}
	}
	return spec, nil
}

// decodeTarget decodes the stored push target of tc (nil for none).
func decodeTarget(tc store.TypeConfig) (*Target, error) {
	raw := bytes.TrimSpace(tc.Target)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var t Target
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode target of type %s: %w", tc.Type, err)
	}
	return &t, nil
}

// unreadable returns spec marked with why it could not be decoded (err),
// for the listings that show such a type rather than fail (ListTypes,
// StoredTypeSpec): the policy shown is not the stored one.
func (e *Engine) unreadable(spec TypeSpec, err error) TypeSpec {
	spec.Policy = e.cfg.DefaultPolicy
	spec.Unreadable = err.Error()
	return spec
}

// TypeSpec returns the effective configuration of a type (defaults for an
// unknown type, with Stored false).
func (e *Engine) TypeSpec(ctx context.Context, typ string) (TypeSpec, error) {
	if err := ValidateType("type", typ); err != nil {
		return TypeSpec{}, err
	}
	ent, err := e.types.get(ctx, typ)
	if err != nil {
		return TypeSpec{}, err
	}
	return ent.spec, nil
}

// StoredTypeSpec is TypeSpec read from the store rather than from this
// node's cache, which may be up to a few seconds behind a change made on
// another node. A stored configuration this binary cannot decode is
// returned with Unreadable set, not as an error.
func (e *Engine) StoredTypeSpec(ctx context.Context, typ string) (TypeSpec, error) {
	if err := ValidateType("type", typ); err != nil {
		return TypeSpec{}, err
	}
	tc, err := e.st.GetType(ctx, typ)
	if errors.Is(err, store.ErrNotFound) {
		return e.defaultSpec(typ), nil
	}
	if err != nil {
		return TypeSpec{}, fmt.Errorf("load type %s: %w", typ, err)
	}
	spec, err := e.decodeType(tc)
	if err != nil {
		return e.unreadable(spec, err), nil
	}
	return spec, nil
}

// StoredTarget returns the push target stored for typ (nil for none),
// read from the store: for a change of the rest of the configuration that
// keeps the target (Client.SetType), which must work even when the stored
// policy is one this binary cannot decode. A target it cannot decode, or
// one with fields it does not know (a newer version's), is an error: it
// could not be kept as it is.
func (e *Engine) StoredTarget(ctx context.Context, typ string) (*Target, error) {
	if err := ValidateType("type", typ); err != nil {
		return nil, err
	}
	tc, err := e.st.GetType(ctx, typ)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load type %s: %w", typ, err)
	}
	raw := bytes.TrimSpace(tc.Target)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var t Target
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("keep the push target of type %s: %w", typ, err)
	}
	return &t, nil
}

// ListTypes returns the stored type configurations. One this binary cannot
// decode is listed with Unreadable set, not an error for the whole list.
func (e *Engine) ListTypes(ctx context.Context) ([]TypeSpec, error) {
	tcs, err := e.st.ListTypes(ctx)
	if err != nil {
		return nil, err // "list types: ..." from the store
	}
	out := make([]TypeSpec, 0, len(tcs))
	for _, tc := range tcs {
		spec, err := e.decodeType(tc)
		if err != nil {
			spec = e.unreadable(spec, err)
		}
		out = append(out, spec)
	}
	return out, nil
}

// ValidateTypePolicy checks a type's retry policy: Policy.Validate, and a
// max attempts of at most MaxMaxAttempts, the bound of a task's own, which
// the type's stands in for when a task sets none. Errors are
// *retry.FieldError, naming the policy's field.
func ValidateTypePolicy(p retry.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.MaxAttempts > MaxMaxAttempts {
		return &retry.FieldError{Field: "max_attempts", Reason: fmt.Sprintf("must be at most %d, as a task's own (got %d)", MaxMaxAttempts, p.MaxAttempts)}
	}
	return nil
}

// PutType validates and stores a type's configuration.
func (e *Engine) PutType(ctx context.Context, spec TypeSpec) (TypeSpec, error) {
	if err := ValidateType("type", spec.Type); err != nil {
		return TypeSpec{}, err
	}
	if err := ValidateTypePolicy(spec.Policy); err != nil {
		return TypeSpec{}, &FieldError{Field: "retry", Message: err.Error(), Err: err}
	}
	if spec.Timeout < 0 || spec.Timeout > 24*time.Hour {
		return TypeSpec{}, fieldErr("timeout_seconds", "must be between 0 and 86400")
	}
	if spec.Priority < -MaxPriority || spec.Priority > MaxPriority {
		return TypeSpec{}, fieldErr("priority", "must be between %d and %d", -MaxPriority, MaxPriority)
	}
	pol, err := json.Marshal(spec.Policy)
	if err != nil {
		return TypeSpec{}, fmt.Errorf("encode policy: %w", err)
	}
	tc := store.TypeConfig{Type: spec.Type, Policy: pol, Timeout: spec.Timeout, Priority: spec.Priority}
	if spec.Target != nil {
		if err := spec.Target.Validate(); err != nil {
			return TypeSpec{}, err
		}
		if tc.Target, err = json.Marshal(spec.Target); err != nil {
			return TypeSpec{}, fmt.Errorf("encode target: %w", err)
		}
	}
	saved, err := e.st.PutType(ctx, tc, e.now())
	if err != nil {
		return TypeSpec{}, err // "put type <type>: ..." from the store
	}
	e.types.invalidate(spec.Type)
	e.pushTypesChanged()
	return e.decodeType(saved)
}
