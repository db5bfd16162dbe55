package engine

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// crockford is the Crockford base32 alphabet: ids sort as text in the order
// they were made (millisecond resolution), then randomly.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var idMu sync.Mutex
var idLast struct {
	ms   uint64
	rand [10]byte
}

// NewID returns a new 26-character, time-ordered, globally unique task id.
// Ids made in the same millisecond by this process increase monotonically.
func NewID(now time.Time) string {
	ms := uint64(now.UnixMilli())
	idMu.Lock()
	if ms <= idLast.ms {
		ms = idLast.ms
		// increment the random part (big-endian) to stay monotonic
		for i := len(idLast.rand) - 1; i >= 0; i-- {
			idLast.rand[i]++
			if idLast.rand[i] != 0 {
				break
			}
		}
	} else {
		idLast.ms = ms
		_, _ = rand.Read(idLast.rand[:])
	}
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], ms<<16)
	copy(raw[6:], idLast.rand[:])
	idMu.Unlock()
	return encode128(raw)
}

func encode128(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	// 128 bits -> 26 base32 digits (130 bits, top 2 bits zero)
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
