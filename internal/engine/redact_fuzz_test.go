package engine

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzRedactURL: whatever the URL, RedactURL does not panic, gives a URL
// that parses (or "(unparsable URL)"), shows no path segment that looks
// like a key and no query value, and is stable: masking its own output
// changes nothing.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"https://hooks.slack.com/services/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",
		"https://svc:pw@api.example/0123456789abcdef0123/hook?key=v&x#frag",
		"https://api.example/hook/s3cret%2Fabcdef0123456789?x=1",
		"https:opaque",
		"https://api.example/%zz?token=s3cret-XYZ",
		"http://[::1]:8080/a%20b/c;d?e=f",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := RedactURL(in, "M")
		if got == "(unparsable URL)" {
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("RedactURL(%q) = %q, which does not parse: %v", in, got, err)
		}
		for _, seg := range strings.Split(u.Path, "/") {
			if keyLike(seg) {
				t.Fatalf("RedactURL(%q) = %q: path segment %q looks like a key", in, got, seg)
			}
		}
		for name, vs := range u.Query() {
			for _, v := range vs {
				if v != "M" && v != "" {
					t.Fatalf("RedactURL(%q) = %q: query %q shows %q", in, got, name, v)
				}
			}
		}
		if again := RedactURL(got, "M"); again != got {
			t.Fatalf("RedactURL(%q) = %q, masked again %q", in, got, again)
		}
	})
}
