package cli

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/retryq/retryq/internal/freeport"
)

// restartAddr returns a free 127.0.0.1 address for a server that a test
// stops and starts again on the same address: its port lies outside the
// kernel's ephemeral range (freeport.Port), so that no connection made
// between the stop and the restart (another test's, or the worker's own,
// dialling the stopped server) takes it and fails the restart's listen
// with "address already in use".
func restartAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// listenAgain calls start until it does not fail with "address already in
// use", for 30s at most: where freeport.Port found no port outside the
// ephemeral range, one in it taken by an outgoing connection is free again
// once that connection closes.
func listenAgain[T any](t *testing.T, start func() (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := start()
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
