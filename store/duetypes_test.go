package store

import (
	"fmt"
	"slices"
	"testing"
)

func TestDueTypes(t *testing.T) {
	var d DueTypes
	if types, all := d.Take(); types != nil || all {
		t.Fatalf("empty: Take = %v, %v", types, all)
	}
	d.Add([]string{"a", "b"})
	d.Add([]string{"b", "c"})
	if types, all := d.Take(); !slices.Equal(types, []string{"a", "b", "c"}) || all {
		t.Fatalf("Take = %v, %v; want [a b c], false", types, all)
	}
	if types, all := d.Take(); types != nil || all {
		t.Fatalf("Take after Take = %v, %v; want nothing", types, all)
	}
	d.Add([]string{"a"})
	d.Add(nil)
	d.Add([]string{"b"})
	if types, all := d.Take(); types != nil || !all {
		t.Fatalf("a notification of no type: Take = %v, %v; want nil, true", types, all)
	}
	for i := range MaxDueTypes + 1 {
		d.Add([]string{fmt.Sprint("t", i)})
	}
	if types, all := d.Take(); types != nil || !all {
		t.Fatalf("past MaxDueTypes: Take = %d types, %v; want nil, true", len(types), all)
	}
}
