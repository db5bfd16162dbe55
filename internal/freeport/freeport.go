// Package freeport finds free 127.0.0.1 TCP ports for tests that stop a
// server and start it again on the same port.
//
// A port that the kernel picked (a listen on port 0) lies in its
// ephemeral range (net.ipv4.ip_local_port_range on Linux), from which it
// also picks the local port of every outgoing connection: while the
// server is stopped, a connection of any process on the machine may take
// that port, and the restart's listen then fails with "address already
// in use". [Port] returns a port outside that range, which only an
// explicit bind takes.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
)

// rangeFile holds the ephemeral range on Linux: two numbers, low and high.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// tries bounds the ports outside the range that Port tries.
const tries = 100

// Port returns a TCP port free on 127.0.0.1 at the time of the call,
// outside the ephemeral range: above it when a port there is free (below
// it lie the registered ports of the services a machine may run), else
// below it, down to 1024. Where the range cannot be read (not Linux), or
// it leaves no free port outside it, Port returns one the kernel picks, as
// a listen on port 0 does; callers that restart should then retry a
// listen that finds the port taken.
func Port() (int, error) {
	if lo, hi, ok := ephemeralRange(); ok {
		for _, p := range candidates(lo, hi) {
			if free(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralRange reads the kernel's ephemeral range; false when it cannot.
func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// candidates returns up to tries ports outside lo..hi in random order,
// those above it first.
func candidates(lo, hi int) []int {
	var above, below []int
	for p := hi + 1; p <= 65535; p++ {
		above = append(above, p)
	}
	for p := 1024; p < lo; p++ {
		below = append(below, p)
	}
	rand.Shuffle(len(above), func(i, j int) { above[i], above[j] = above[j], above[i] })
	rand.Shuffle(len(below), func(i, j int) { below[i], below[j] = below[j], below[i] })
	above = append(above, below...)
	return above[:min(len(above), tries)]
}

// free reports whether port p can be listened on at 127.0.0.1 now.
func free(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	return l.Close() == nil
}
