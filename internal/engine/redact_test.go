package engine

import (
	"strings"
	"testing"
)

// TestRedactURLMasksAUserNameThatStandsAlone: a userinfo without a password
// (https://sk_live_123@api.example/) is how many APIs take a key by basic
// auth, so the user name is masked then, as it is beside an empty password
// (https://KEY:@api.example/, curl -u KEY:); beside a password, the user
// name stays (the password is the secret) and the password is masked.
func TestRedactURLMasksAUserNameThatStandsAlone(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://sk_live_123@api.example/v1", "https://M@api.example/v1"},
		{"https://svc:s3cret@api.example/v1", "https://svc:M@api.example/v1"},
		{"https://svc:@api.example/v1", "https://M:@api.example/v1"},
		{"https://api.example/v1?key=k&x=1", "https://api.example/v1?key=M&x=M"},
		{"https://api.example/v1", "https://api.example/v1"},
	} {
		if got := RedactURL(c.in, "M"); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRedactURLHidesEveryPlaceOfASecret: RedactURL shows no secret of a URL
// however it is spelled: an opaque URL (https:user:pass@host, which
// url.Parse reads as scheme and opaque text and String gave back whole), a
// query parameter without '=' (?KEY, whose name is the key), a fragment
// (#access_token=...), a percent-encoded password, a query that net/url
// cannot decode. Parameter names given with '=' stay.
func TestRedactURLHidesEveryPlaceOfASecret(t *testing.T) {
	for _, in := range []string{
		"https:svc:s3cret-XYZ@api.example/v1",
		"https:s3cret-XYZ",
		"https://api.example/hook?s3cret-XYZ",
		"https://api.example/hook?x=1&s3cret-XYZ",
		"https://api.example/hook#access_token=s3cret-XYZ",
		"https://api.example/hook#s3cret-XYZ",
		"https://svc:s3c%72et-XYZ@api.example/v1",
		"https://api.example/hook?token=s3cret-XYZ;x=1",
		"https://api.example/hook?token=s3cret-XYZ%zz",
		"https://api.example/hook?token=s3cret-XYZ&token=s3cret-XYZ",
		"https://api.example/hook?=s3cret-XYZ",
		"https://s3cret-XYZ:@api.example/",
		"https://api.example/%zz?token=s3cret-XYZ",
		"https://svc:s3cret-XYZ@api.example:99999/",
	} {
		got := RedactURL(in, "M")
		if strings.Contains(got, "s3c") || strings.Contains(got, "XYZ") {
			t.Errorf("RedactURL(%q) = %q: shows the secret", in, got)
		}
	}
	for in, want := range map[string]string{
		"https://api.example/hook?token=k&b=2": "https://api.example/hook?token=M&b=M",
		"https://api.example/hook?a=1;b=2":     "https://api.example/hook?a=M",
		"https://api.example/hook?key":         "https://api.example/hook?M",
		"https://api.example/hook#frag":        "https://api.example/hook#M",
		"https:opaque":                         "https:M",
	} {
		if got := RedactURL(in, "M"); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTargetValidateDoesNotQuoteSecrets: Validate's error names the URL it
// refuses with its secrets masked: the pusher logs the error of a stored
// target it cannot use (push: invalid target), and it quoted the URL whole.
// A URL that does not parse is not quoted at all.
func TestTargetValidateDoesNotQuoteSecrets(t *testing.T) {
	for _, u := range []string{
		"ftp://svc:s3cret-XYZ@files.example/in",
		"http://svc:s3cret-XYZ@:8080/hook",
		"https:svc:s3cret-XYZ@api.example/v1",
		"https://api.example/hook%zz?token=s3cret-XYZ",
		"https://svc:s3cret-XYZ@api.example:99x/",
		"//api.example/hook?token=s3cret-XYZ",
	} {
		err := (&Target{URL: u}).Validate()
		if err == nil {
			t.Errorf("Validate(%q) = nil, want an error", u)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "XYZ") {
			t.Errorf("Validate(%q): the error shows the secret: %s", u, msg)
		}
		if !strings.Contains(err.Error(), "target.url") {
			t.Errorf("Validate(%q) = %v, want it to name target.url", u, err)
		}
	}
}

// TestRedactURLMasksKeysInThePath: the webhook URLs of many services carry
// their secret as a path segment (Slack, Discord, Teams, Telegram, a hex
// digest or a UUID); RedactURL masks a segment that looks like a key and
// keeps the others, names and numeric ids, so targets can still be told
// apart.
func TestRedactURLMasksKeysInThePath(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/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":                                                  "https://hooks.slack.com/services/T0AB12CD3/B0CD45EF6/M",
		"https://discord.com/api/webhooks/112233445566778899/Ab-9_xYz0123456789abcdefGHIJ":                                               "https://discord.com/api/webhooks/112233445566778899/M",
		"https://api.telegram.org/bot123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11/sendMessage":                                              "https://api.telegram.org/M/sendMessage",
		"https://x.webhook.office.com/webhookb2/0f8fad5b-d9cb-469f-a165-70867728950e/IncomingWebhook/9b2c4d6e8f0a1b3c5d7e9f1a2b3c4d5e/x": "https://x.webhook.office.com/webhookb2/M/IncomingWebhook/M/x",
		"https://hooks.example/aBcDeFgHiJkLmNoPqRsTuVwX":                                                                                 "https://hooks.example/M",
		"https://api.example/v1/customer-subscription-updated":                                                                           "https://api.example/v1/customer-subscription-updated",
		"https://api.example/v1/hooks/order/12345678901234567890123":                                                                     "https://api.example/v1/hooks/order/12345678901234567890123",
		"https://api.example/a%20b/c":                            "https://api.example/a%20b/c",
		"https://api.example/hook/s3cret%2Fabcdef0123456789?x=1": "https://api.example/hook/M?x=M",
		"https://svc:pw@api.example/0123456789abcdef0123/hook#f": "https://svc:M@api.example/M/hook#M",
	} {
		if got := RedactURL(in, "M"); got != want {
			t.Errorf("RedactURL(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}
