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
// the fragment, and the whole text after the scheme of an opaque URL
// (https:user:pass@host, which has no parts to tell apart). The
// parameters' names stay, so an operator can still tell targets apart. An
// unparsable URL gives "(unparsable URL)": no part of it is echoed.
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
	if u.RawQuery != "" {
		u.RawQuery = redactQuery(u.RawQuery, url.QueryEscape(mask))
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = mask, ""
	}
	return u.String()
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
