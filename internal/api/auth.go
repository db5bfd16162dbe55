package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Access is the permission level a request's token grants.
type Access int

// The access levels.
const (
	// AccessNone: no token, or a token that matches no configured token.
	AccessNone Access = iota
	// AccessRead: a read-only token; GET and HEAD only.
	AccessRead
	// AccessFull: a full-access API token.
	AccessFull
)

// Auth checks bearer tokens. Tokens are kept as SHA-256 digests and every
// request's token is compared against every configured token in constant
// time, without an early exit, so neither the position of a match nor a
// common prefix shows in the timing. The zero of both lists disables
// authentication. An Auth is safe for concurrent use.
type Auth struct {
	full [][sha256.Size]byte
	read [][sha256.Size]byte
}

// NewAuth returns an Auth for the given full-access and read-only tokens.
// Empty tokens and tokens listed in both lists are errors.
func NewAuth(apiTokens, readTokens []string) (*Auth, error) {
	a := &Auth{}
	seen := make(map[string]bool)
	for i, t := range apiTokens {
		if err := CheckToken(t); err != nil {
			return nil, fmt.Errorf("APITokens[%d]: %w", i, err)
		}
		seen[t] = true
		a.full = append(a.full, sha256.Sum256([]byte(t)))
	}
	for i, t := range readTokens {
		if err := CheckToken(t); err != nil {
			return nil, fmt.Errorf("ReadTokens[%d]: %w", i, err)
		}
		if seen[t] {
			return nil, fmt.Errorf("ReadTokens[%d]: is also a full-access API token", i)
		}
		a.read = append(a.read, sha256.Sum256([]byte(t)))
	}
	return a, nil
}

// CheckToken refuses a token no request could present: an empty one, one
// with surrounding white space (the Authorization header's value is read
// trimmed, so it would never match), or one holding a control character
// other than a tab (no HTTP header value may hold one).
func CheckToken(t string) error {
	switch {
	case strings.TrimSpace(t) == "":
		return errors.New("must not be empty")
	case strings.TrimSpace(t) != t:
		return errors.New("must not start or end with white space")
	case strings.ContainsFunc(t, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }):
		return errors.New("must not hold control characters: no request could send it")
	}
	return nil
}

// Enabled reports whether any token is configured.
func (a *Auth) Enabled() bool { return len(a.full)+len(a.read) > 0 }

// Check returns the access the request's "Authorization: Bearer <token>"
// header grants.
func (a *Auth) Check(r *http.Request) Access {
	tok, ok := bearerToken(r)
	if !ok {
		return AccessNone
	}
	d := sha256.Sum256([]byte(tok))
	full, read := 0, 0
	for i := range a.full {
		full |= subtle.ConstantTimeCompare(d[:], a.full[i][:])
	}
	for i := range a.read {
		read |= subtle.ConstantTimeCompare(d[:], a.read[i][:])
	}
	switch {
	case full == 1:
		return AccessFull
	case read == 1:
		return AccessRead
	}
	return AccessNone
}

// bearerToken returns the token of the request's one Authorization header.
// A request with more than one has none: HTTP allows one, and taking any
// of them would grant an access that depends on their order.
func bearerToken(r *http.Request) (string, bool) {
	hs := r.Header.Values("Authorization")
	if len(hs) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(hs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// mutating reports whether a method changes state (and so needs full access).
func mutating(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// msgManyAuthorizations answers a request with more than one
// Authorization header.
const msgManyAuthorizations = "more than one Authorization header: send one, Authorization: Bearer <token>"

// authorize returns nil when the request may proceed, else the 401 or 403
// error to send.
func (a *Auth) authorize(r *http.Request) error {
	if !a.Enabled() {
		return nil
	}
	switch a.Check(r) {
	case AccessFull:
		return nil
	case AccessRead:
		if mutating(r.Method) {
			return &apiError{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "this token is read-only; " + r.Method + " needs a full-access API token"}
		}
		return nil
	}
	msg := "missing bearer token: send Authorization: Bearer <token>"
	if len(r.Header.Values("Authorization")) > 1 {
		msg = msgManyAuthorizations
	} else if _, ok := bearerToken(r); ok {
		msg = "invalid bearer token"
	}
	return &apiError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: msg}
}

// Middleware enforces the tokens on every request that reaches next: 401
// (with WWW-Authenticate) without a valid token, 403 for a read-only token
// on a mutating method. It passes everything through when authentication
// is disabled. Error bodies are the API's JSON errors.
func (a *Auth) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.authorize(r); err != nil {
			var ae *apiError
			errors.As(err, &ae)
			writeAPIError(w, ae, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CheckListen refuses to serve an unauthenticated API on anything but a
// loopback address: with tokensSet false, addr (host:port) must name
// localhost or a loopback IP. An empty host means every interface and is
// refused too.
func CheckListen(addr string, tokensSet bool) error {
	if tokensSet {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid listen address %q: %w", addr, err)
	}
	if isLoopback(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without --api-token: the API would accept unauthenticated "+
		"requests from other machines; set --api-token (or RETRYQ_API_TOKEN) or listen on 127.0.0.1", addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}
