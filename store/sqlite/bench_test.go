package sqlite

import (
	"os"
	"strconv"
	"testing"

	"github.com/retryq/retryq/store/storetest"
)

// Run with, for example:
//
//	go test -run XXX -bench . -benchtime 2s ./store/sqlite
//	RETRYQ_BENCH_1M=1 go test -run XXX -bench Waiting -benchtime 200x ./store/sqlite
//
// Every benchmark uses synchronous=FULL (the default).

func BenchmarkInsert(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			storetest.BenchInsert(b, openTemp(b), batch)
		})
	}
}

func BenchmarkFetchComplete(b *testing.B) {
	for _, batch := range []int{10, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			storetest.BenchFetchComplete(b, openTemp(b), batch)
		})
	}
}

func BenchmarkPipeline(b *testing.B) {
	b.Run("insert=1000,fetch=100", func(b *testing.B) {
		storetest.BenchPipeline(b, openTemp(b), 1000, 100)
	})
}

func waitingSizes() []int {
	sizes := []int{10_000}
	if os.Getenv("RETRYQ_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	return sizes
}

func BenchmarkFetchWaiting(b *testing.B) {
	for _, n := range waitingSizes() {
		b.Run("waiting="+strconv.Itoa(n), func(b *testing.B) {
			storetest.BenchFetchWaiting(b, openTemp(b), n, 100)
		})
	}
}

func BenchmarkPromoteWaiting(b *testing.B) {
	for _, n := range waitingSizes() {
		b.Run("waiting="+strconv.Itoa(n), func(b *testing.B) {
			storetest.BenchPromoteWaiting(b, openTemp(b), n, 100)
		})
	}
}
