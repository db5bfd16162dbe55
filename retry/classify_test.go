package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// refusedErr dials a port on 127.0.0.1 that was just closed.
func refusedErr(t *testing.T) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err == nil {
		c.Close()
		t.Skip("closed port accepted a connection")
	}
	return err
}

// resetErr reads from a connection whose peer closes it with an RST.
func resetErr(t *testing.T) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.(*net.TCPConn).SetLinger(0) // close sends RST instead of FIN
		c.Close()
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		return err // the RST can already reach the handshake
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if err == io.EOF {
		t.Skip("peer closed with FIN, not RST")
	}
	return err
}

// timeoutErr reads from a connection whose deadline has passed.
func timeoutErr(t *testing.T) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(-time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

type pgError struct{ code string }

func (e *pgError) Error() string    { return "ERROR: could not serialize (SQLSTATE " + e.code + ")" }
func (e *pgError) SQLState() string { return e.code }

func TestClassify(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		class     Class
		code      string
		retryWait time.Duration
	}{
		{"nil", nil, ClassUnknown, "", 0},
		{"plain", base, ClassUnknown, "", 0},
		{"permanent", Permanent(base), ClassPermanent, "", 0},
		{"transient wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", Transient(base))), ClassTransient, "", 0},
		{"retry after", fmt.Errorf("x: %w", RetryAfter(base, 3*time.Second)), ClassTransient, "", 3 * time.Second},
		{"code only", WithCode("invalid_format", base), ClassUnknown, "invalid_format", 0},
		{"code around transient", WithCode("db", Transient(base)), ClassTransient, "db", 0},
		{"permanent around code", Permanent(fmt.Errorf("w: %w", WithCode("x", base))), ClassPermanent, "x", 0},
		{"permanent around http 503", Permanent(&HTTPError{StatusCode: 503, RetryAfter: time.Second}), ClassPermanent, "503", time.Second},
		{"code around deadline", WithCode("slow", context.DeadlineExceeded), ClassTransient, "slow", 0},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), ClassTransient, CodeDeadlineExceeded, 0},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), ClassUnknown, CodeCanceled, 0},
		{"refused", refusedErr(t), ClassTransient, CodeConnectionRefused, 0},
		{"reset", resetErr(t), ClassTransient, CodeConnectionReset, 0},
		{"timeout", timeoutErr(t), ClassTransient, CodeTimeout, 0},
		{"unexpected eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ClassTransient, CodeConnectionReset, 0},
		{"dns not found", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, ClassPermanent, CodeDNSNotFound, 0},
		{"dns temporary", &net.DNSError{Err: "server misbehaving", IsTemporary: true}, ClassTransient, CodeDNS, 0},
		{"dns timeout", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "i/o timeout", IsTimeout: true}}, ClassTransient, CodeDNS, 0},
		{"dns other", &net.DNSError{Err: "weird"}, ClassUnknown, CodeDNS, 0},
		{"serialization", fmt.Errorf("tx: %w", &pgError{"40001"}), ClassTransient, "40001", 0},
		{"deadlock", &pgError{"40P01"}, ClassTransient, "40P01", 0},
		{"unique violation", &pgError{"23505"}, ClassUnknown, "23505", 0},
		{"http 429", fmt.Errorf("call: %w", &HTTPError{StatusCode: 429, RetryAfter: 2 * time.Second}), ClassTransient, "429", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, code, ra := Classify(tt.err)
			if class != tt.class || code != tt.code || ra != tt.retryWait {
				t.Errorf("Classify(%v) = %v, %q, %v; want %v, %q, %v", tt.err, class, code, ra, tt.class, tt.code, tt.retryWait)
			}
		})
	}
}

func TestClassifyHTTPStatuses(t *testing.T) {
	transient := map[int]bool{408: true, 425: true, 429: true, 500: true, 502: true, 503: true, 504: true, 599: true}
	for status := 400; status <= 599; status++ {
		want := ClassPermanent
		if transient[status] || (status >= 500 && status != 501) {
			want = ClassTransient
		}
		class, code, _ := Classify(&HTTPError{StatusCode: status})
		if class != want || code != strconv.Itoa(status) {
			t.Errorf("status %d: %v %q, want %v", status, class, code, want)
		}
	}
}

func TestTypedErrorsUnwrap(t *testing.T) {
	base := errors.New("boom")
	for _, err := range []error{Permanent(base), Transient(base), RetryAfter(base, time.Second), WithCode("c", base)} {
		wrapped := fmt.Errorf("ctx: %w", err)
		var te *Error
		if !errors.Is(wrapped, base) || !errors.As(wrapped, &te) || wrapped.Error() != "ctx: boom" {
			t.Errorf("%#v: Is=%v As=%v msg=%q", err, errors.Is(wrapped, base), errors.As(wrapped, &te), wrapped.Error())
		}
	}
	for _, err := range []error{Permanent(nil), Transient(nil), RetryAfter(nil, time.Second), WithCode("x", nil)} {
		if err != nil {
			t.Errorf("typed constructor of nil = %v", err)
		}
	}
}

func TestPolicyClassifyLists(t *testing.T) {
	base := errors.New("boom")
	allow := Policy{RetryOn: []string{"503", "ETIMEDOUT", "409"}, NoRetryOn: []string{"503"}}
	deny := Policy{NoRetryOn: []string{"400", "invalid_format", "timeout"}}
	tests := []struct {
		name string
		p    Policy
		err  error
		want Class
	}{
		{"no lists keep class", Policy{}, &HTTPError{StatusCode: 503}, ClassTransient},
		{"no lists keep unknown", Policy{}, base, ClassUnknown},
		{"deny wins over allow", allow, &HTTPError{StatusCode: 503}, ClassPermanent},
		{"allow listed user code", allow, WithCode("ETIMEDOUT", base), ClassTransient},
		{"allow upgrades built-in permanent", allow, &HTTPError{StatusCode: 409}, ClassTransient},
		{"not on allow list", allow, &HTTPError{StatusCode: 502}, ClassPermanent},
		{"no code with allow list", allow, base, ClassPermanent},
		{"typed permanent stays", allow, Permanent(WithCode("ETIMEDOUT", base)), ClassPermanent},
		{"deny user code", deny, fmt.Errorf("parse: %w", WithCode("invalid_format", Transient(base))), ClassPermanent},
		{"deny built-in code", deny, timeoutErr(t), ClassPermanent},
		{"not denied", deny, &HTTPError{StatusCode: 500}, ClassTransient},
	}
	for _, tt := range tests {
		if got, _, _ := tt.p.Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify = %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := allow.ClassifyCode("409", ClassPermanent); got != ClassTransient {
		t.Errorf("ClassifyCode(409) = %v", got)
	}
	if got := deny.ClassifyCode("x", ClassTransient); got != ClassTransient {
		t.Errorf("ClassifyCode(x) = %v", got)
	}
}

func TestClassText(t *testing.T) {
	for _, c := range []Class{ClassUnknown, ClassTransient, ClassPermanent} {
		text, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Class
		if err := back.UnmarshalText(text); err != nil || back != c || c.String() != string(text) {
			t.Errorf("class %v: %q %v %v", c, text, back, err)
		}
	}
	if _, err := ParseClass("sometimes"); err == nil {
		t.Error("ParseClass accepted garbage")
	}
	if _, err := Class(9).MarshalText(); err == nil || Class(9).String() != "Class(9)" {
		t.Error("out-of-range class")
	}
}

// TestClassifyTypedNilErrors: a nil *Error or *HTTPError returned as an
// error (a non-nil interface holding a nil pointer, a common Go mistake) is
// classified as unknown instead of panicking in Classify, and so in Do.
func TestClassifyTypedNilErrors(t *testing.T) {
	var te *Error
	var he *HTTPError
	for _, err := range []error{te, he, fmt.Errorf("call: %w", he)} {
		if class, code, ra := Classify(err); class != ClassUnknown || code != "" || ra != 0 {
			t.Errorf("Classify(%T nil) = %v, %q, %v; want unknown", err, class, code, ra)
		}
	}
}

// TestClassifyJoinedPermanent: an error joining several (errors.Join,
// fmt.Errorf with several %w) is permanent, with the permanent branch's
// code, when one branch is explicitly Permanent, whichever branch comes
// first: a retry cannot fix that part. Without one, the first typed branch
// decides, as before. The permanent branch was ignored when a retryable
// typed branch came first.
func TestClassifyJoinedPermanent(t *testing.T) {
	bad, slow := errors.New("bad"), errors.New("slow")
	tests := []struct {
		name  string
		err   error
		class Class
		code  string
		after time.Duration
	}{
		{"permanent first", errors.Join(Permanent(bad), RetryAfter(slow, time.Second)), ClassPermanent, "", 0},
		{"retry-after first", errors.Join(RetryAfter(slow, time.Second), Permanent(bad)), ClassPermanent, "", 0},
		{"code of the permanent branch", errors.Join(WithCode("a", Transient(slow)), WithCode("b", Permanent(bad))), ClassPermanent, "b", 0},
		{"several %w", fmt.Errorf("%w; %w", Transient(slow), Permanent(bad)), ClassPermanent, "", 0},
		{"join under a wrap", fmt.Errorf("batch: %w", errors.Join(Transient(slow), Permanent(bad))), ClassPermanent, "", 0},
		{"join under a code", WithCode("batch", errors.Join(Transient(slow), Permanent(bad))), ClassPermanent, "batch", 0},
		{"nested joins", errors.Join(slow, errors.Join(Transient(slow), Permanent(bad))), ClassPermanent, "", 0},
		{"explicit transient over a permanent cause", Transient(errors.Join(slow, Permanent(bad))), ClassTransient, "", 0},
		{"no permanent branch", errors.Join(slow, RetryAfter(slow, time.Second), Permanent(nil)), ClassTransient, "", time.Second},
		{"a guessed permanent is no explicit one", errors.Join(Transient(slow), &HTTPError{StatusCode: 400}), ClassTransient, "", 0},
	}
	for _, tc := range tests {
		class, code, after := Classify(tc.err)
		if class != tc.class || code != tc.code || after != tc.after {
			t.Errorf("%s: Classify = %v, %q, %v; want %v, %q, %v", tc.name, class, code, after, tc.class, tc.code, tc.after)
		}
		if tc.class == ClassPermanent {
			p := Policy{RetryOn: []string{"b"}}
			if class, _, _ := p.Classify(tc.err); class != ClassPermanent {
				t.Errorf("%s: Policy.Classify with a retry_on list = %v, want permanent", tc.name, class)
			}
		}
	}
}
