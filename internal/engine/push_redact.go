package engine

import (
	"net/url"
	"strings"
)

// redactURL returns raw with its secrets masked (RedactURL): the form in
// which log lines name a target.
func redactURL(raw string) string {
	return RedactURL(raw, "xxxxx")
}

// redactLocation returns a 3xx response's Location with its secrets
// masked (RedactURL); an empty one stays empty and one that is not a URL
// reference is named as such, no part of it echoed.
func redactLocation(loc string) string {
	if loc == "" {
		return ""
	}
	if red := RedactURL(loc, "xxxxx"); red != "(unparsable URL)" {
		return red
	}
	return "(unparsable Location)"
}

// RedactURL returns a target URL with the values that may be credentials
// replaced by mask: the password of its userinfo (net/http sends userinfo
// as basic auth), or its user name when it has no password or an empty one
// (an API key given as https://KEY@host/ or https://KEY:@host/), the value
// of every query parameter (webhook and API URLs often carry a key or a
// signature there: ?api_key=..., ?sig=...), a query parameter given
// without '=' or with a name of other than name characters whole (?KEY),
// the fragment, every path segment that looks like a key (keyLike: the
// token of a Slack, Discord, Teams or Telegram webhook URL, a hex digest,
// a UUID), and the whole text after the scheme of an opaque URL
// (https:user:pass@host, which has no parts to tell apart). The
// parameters' names and the other path segments stay, so an operator can
// still tell targets apart. An unparsable URL gives "(unparsable URL)": no
// part of it is echoed.
func RedactURL(raw, mask string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.Opaque != "" {
		u.Opaque = url.PathEscape(mask)
	}
	if u.User != nil {
		name := u.User.Username()
		switch pw, has := u.User.Password(); {
		case has && pw != "":
			u.User = url.UserPassword(name, mask)
		case has && name != "":
			// A key given as the user name of basic auth with an empty
			// password (curl -u KEY:).
			u.User = url.UserPassword(mask, "")
		case name != "":
			// A user name alone is how many APIs take a key by basic
			// auth (https://KEY@api.example/).
			u.User = url.User(mask)
		}
	}
	redactPath(u, url.PathEscape(mask))
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery, url.QueryEscape(mask))
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = mask, ""
	}
	return u.String()
}

// redactPath replaces every segment of u's path that looks like a key
// (keyLike, judged on the segment decoded) by mask, an escaped segment;
// the other segments keep their spelling. EscapedPath is always a valid
// encoding, so every segment decodes (one that did not would be masked).
func redactPath(u *url.URL, mask string) {
	segs := strings.Split(u.EscapedPath(), "/")
	masked := false
	for i, s := range segs {
		if dec, err := url.PathUnescape(s); err != nil || keyLike(dec) {
			segs[i], masked = mask, true
		}
	}
	if !masked {
		return
	}
	raw := strings.Join(segs, "/")
	if p, err := url.PathUnescape(raw); err == nil {
		u.Path, u.RawPath = p, raw
	}
}

// keyLike reports whether a path segment looks like a key rather than a
// name: at least 20 characters holding both letters and digits (webhook
// tokens, hex digests, UUIDs), or at least 24 mixing upper and lower case
// letters (a random token that happens to hold no digit). Names made of
// words ("customer-subscription-updated", "IncomingWebhook") and numeric
// ids (a Discord webhook's, which is no secret without its token) stay.
func keyLike(s string) bool {
	if len(s) < 20 {
		return false
	}
	var digit, lower, upper bool
	for _, r := range s {
		switch {
		case '0' <= r && r <= '9':
			digit = true
		case 'a' <= r && r <= 'z':
			lower = true
		case 'A' <= r && r <= 'Z':
			upper = true
		}
	}
	return digit && (lower || upper) || len(s) >= 24 && lower && upper
}

// redactQuery returns the raw query q with every parameter's value
// replaced by mask, keeping the parameters' order and names. A parameter
// without '=', or whose name holds other than the characters of a name,
// is replaced whole: its text may be the key itself.
func redactQuery(q, mask string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		if p == "" {
			continue
		}
		name, _, ok := strings.Cut(p, "=")
		if !ok || strings.ContainsFunc(name, notNameChar) {
			parts[i] = mask
			continue
		}
		parts[i] = name + "=" + mask
	}
	return strings.Join(parts, "&")
}

// notNameChar reports whether r is not a character of a query parameter's
// name as RedactURL keeps it: letters, digits, '-', '_', '.', '~', the
// brackets of array parameters and '%' of an encoded byte.
func notNameChar(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("-_.~[]%", r)
}
