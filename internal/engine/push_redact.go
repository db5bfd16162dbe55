package engine

import "net/url"

// redactURL returns raw with its secrets masked (RedactURL): the form in
// which log lines name a target.
func redactURL(raw string) string {
	return RedactURL(raw, "xxxxx")
}

// RedactURL returns a target URL with the values that may be credentials
// replaced by mask: the password of its userinfo (net/http sends userinfo
// as basic auth), or its user name when it has no password (an API key
// given as https://KEY@host/), and the value of every query parameter (webhook and API
// URLs often carry a key or a signature there: ?api_key=..., ?sig=...).
// The parameters' names stay, so an operator can still tell targets
// apart. An unparsable URL gives "(unparsable URL)".
func RedactURL(raw, mask string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), mask)
		} else if u.User.Username() != "" {
			// A user name alone is how many APIs take a key by basic
			// auth (https://KEY@api.example/).
			u.User = url.User(mask)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k, vs := range q {
			for i := range vs {
				vs[i] = mask
			}
			q[k] = vs
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
