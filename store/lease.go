package store

import (
	"crypto/rand"
	"encoding/hex"
)

// NewLeasePrefix returns a random prefix for the lease ids of one fetch.
// A backend appends something unique to each task of the fetch (its row id
// or task id), so lease ids are unique within the fetch and, with 128
// random bits, across fetches, without drawing randomness per task.
func NewLeasePrefix() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("store: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:]) + "."
}
