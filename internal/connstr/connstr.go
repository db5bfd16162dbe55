// Package connstr hides the secrets of database connection strings
// (PostgreSQL URLs and keyword/value strings) in the text that quotes them:
// error messages, log lines, a command's output.
package connstr

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// urlSchemeRE matches the scheme that starts a URL, however mistyped the
// rest ("postgres:/u:pw@h"); a string without one is read as keyword/value
// pairs, as the PostgreSQL driver does.
var urlSchemeRE = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*:`)

// urlParamRE matches a URL parameter: a name, then its value up to the
// next '&' or the fragment. The value may hold spaces: net/url keeps them.
var urlParamRE = regexp.MustCompile(`([^?&#/;=]*)=([^&#]*)`)

// Redact hides the passwords in a connection string it is given: the value of
// every parameter whose name holds "pass" (password, sslpassword, however
// cased or percent-encoded), read as the driver reads it (a URL's query
// parameter up to '&', a keyword/value pair's quoted or unquoted value
// with its escapes), and the user information before the last '@' of a
// URL, however mistyped its scheme (postgres:/u:pw@h). Each finds spans of
// the original text; every span is hidden whole, so that what cannot be
// told apart from a password is hidden with it.
func Redact(dsn string) string {
	var spans [][2]int
	if urlSchemeRE.MatchString(dsn) {
		for _, m := range urlParamRE.FindAllStringSubmatchIndex(dsn, -1) {
			key := dsn[m[2]:m[3]]
			if k, err := url.QueryUnescape(key); err == nil {
				key = k
			}
			if secretKey(key) {
				spans = append(spans, [2]int{m[4], m[5]})
			}
		}
	} else {
		spans = keywordSecrets(dsn)
	}
	if at := strings.LastIndex(dsn, "@"); at >= 0 {
		start := 0
		if i := strings.Index(dsn[:at], "://"); i >= 0 {
			start = i + 3
		}
		if i := strings.IndexByte(dsn[start:at], ':'); i >= 0 {
			spans = append(spans, [2]int{start + i + 1, at})
		}
	}
	if len(spans) == 0 {
		return dsn
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(spans); {
		lo, hi := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= hi; i++ {
			hi = max(hi, spans[i][1])
		}
		b.WriteString(dsn[pos:lo])
		b.WriteString("***")
		pos = hi
	}
	b.WriteString(dsn[pos:])
	return b.String()
}

// secretKey reports whether a connection parameter's name names a secret.
func secretKey(key string) bool {
	return strings.Contains(strings.ToLower(key), "pass")
}

// keywordSecrets returns the spans of the secret values of a keyword/value
// connection string ("host=h password='p w'"), read as libpq reads it:
// spaces may surround '=', a value is quoted with ' or runs to the next
// space, and a backslash escapes the next byte in either.
func keywordSecrets(s string) [][2]int {
	var spans [][2]int
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			break
		}
		key := strings.TrimRight(s[i:i+eq], " \t\n\r\v\f")
		if j := strings.LastIndexAny(key, " \t\n\r\v\f"); j >= 0 {
			key = key[j+1:]
		}
		v := i + eq + 1
		for v < len(s) && isConnSpace(s[v]) {
			v++
		}
		end, closed := v, false
		quoted := end < len(s) && s[end] == '\''
		if quoted {
			end++
		}
		for ; end < len(s); end++ {
			if s[end] == '\\' {
				end++
				continue
			}
			if quoted && s[end] == '\'' {
				end++
				closed = true
				break
			}
			if !quoted && isConnSpace(s[end]) {
				break
			}
		}
		end = min(end, len(s))
		if secretKey(key) {
			if closed { // keep the quotes: what follows stays a pair of its own
				spans = append(spans, [2]int{v + 1, end - 1})
			} else {
				spans = append(spans, [2]int{v, end})
			}
		}
		i = end
		if i == v { // an empty value: the next pair starts after it
			i++
		}
	}
	return spans
}

// isConnSpace reports whether c separates keyword/value pairs.
func isConnSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}
