package engine

import "testing"

// TestRedactURLMasksAUserNameThatStandsAlone: a userinfo without a password
// (https://sk_live_123@api.example/) is how many APIs take a key by basic
// auth, so the user name is masked then; beside a password, the user name
// stays (the password is the secret) and the password is masked.
func TestRedactURLMasksAUserNameThatStandsAlone(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://sk_live_123@api.example/v1", "https://M@api.example/v1"},
		{"https://svc:s3cret@api.example/v1", "https://svc:M@api.example/v1"},
		{"https://svc:@api.example/v1", "https://svc:M@api.example/v1"},
		{"https://api.example/v1?key=k&x=1", "https://api.example/v1?key=M&x=M"},
		{"https://api.example/v1", "https://api.example/v1"},
	} {
		if got := RedactURL(c.in, "M"); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
