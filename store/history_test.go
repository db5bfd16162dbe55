package store

import (
	"errors"
	"math"
	"testing"
)

func TestHistoryVersion(t *testing.T) {
	known := []string{"0001_init", "0002_more"}
	for _, c := range []struct {
		name    string
		history []HistoryRow
		want    int
		foreign bool
	}{
		{"empty", nil, 0, false},
		{"first", []HistoryRow{{1, "0001_init"}}, 1, false},
		{"all", []HistoryRow{{1, "0001_init"}, {2, "0002_more"}}, 2, false},
		{"newer binary's", []HistoryRow{{1, "0001_init"}, {2, "0002_more"}, {3, "0003_later"}}, 3, false},
		{"another name", []HistoryRow{{1, "create_users"}}, 0, true},
		{"a gap", []HistoryRow{{2, "0002_more"}}, 0, true},
		{"a timestamp version", []HistoryRow{{20240101120000, "0001_init"}}, 0, true},
		{"zero", []HistoryRow{{0, "0001_init"}}, 0, true},
		{"beyond int32", []HistoryRow{{1, "0001_init"}, {2, "0002_more"}, {math.MaxInt32 + 1, "x"}}, 0, true},
	} {
		got, err := HistoryVersion(c.history, known)
		if c.foreign {
			if !errors.Is(err, ErrForeignSchema) {
				t.Errorf("%s: HistoryVersion = %d, %v; want ErrForeignSchema", c.name, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: HistoryVersion = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}
