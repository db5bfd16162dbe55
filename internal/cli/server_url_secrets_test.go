package cli

import (
	"strings"
	"testing"
)

// TestServerURLRefusalHidesItsSecrets: a --server (or RETRYQ_SERVER) that
// holds user information, a query or a fragment is refused, and quoted in
// the refusal with their values masked: the CLI's errors end in CI logs,
// and it quoted the URL whole, password or token included.
func TestServerURLRefusalHidesItsSecrets(t *testing.T) {
	for _, raw := range []string{
		"http://admin:s3cret-XYZ@127.0.0.1:1",
		"admin:s3cret-XYZ@127.0.0.1:1",
		"http://s3cret-XYZ@127.0.0.1:1",
		"http://127.0.0.1:1/?token=s3cret-XYZ",
		"http://127.0.0.1:1/#s3cret-XYZ",
		"http://admin:s3cret-XYZ@127.0.0.1:99x",
		"http://admin:s3cret-XYZ@127.0.0.1:99999",
	} {
		st, _, stderr := runMain("stats", "--server", raw)
		if st != exitUsage || !strings.Contains(stderr, "--server") || strings.Contains(stderr, "s3cret") {
			t.Errorf("stats --server %q: status %d, stderr %q; want %d naming --server, without the secret", raw, st, stderr, exitUsage)
		}
		t.Setenv("RETRYQ_SERVER", raw)
		st, _, stderr = runMain("stats")
		if st != exitUsage || !strings.Contains(stderr, "RETRYQ_SERVER") || strings.Contains(stderr, "s3cret") {
			t.Errorf("RETRYQ_SERVER=%q stats: status %d, stderr %q; want %d naming RETRYQ_SERVER, without the secret", raw, st, stderr, exitUsage)
		}
	}
}
