package ilist

import (
	"slices"
	"testing"
)

type item struct {
	Entry[item]
	n int
}

func values(l *List[item, *item]) []int {
	var out []int
	for v := l.Front(); v != nil; v = v.Next() {
		out = append(out, v.n)
	}
	// The backward links must agree.
	var back []int
	for v := l.tail; v != nil; v = v.prev {
		back = append(back, v.n)
	}
	slices.Reverse(back)
	if !slices.Equal(out, back) {
		panic("forward and backward links differ")
	}
	return out
}

func TestList(t *testing.T) {
	var l List[item, *item]
	if !l.Empty() || l.Front() != nil {
		t.Fatal("zero list not empty")
	}
	it := make([]*item, 6)
	for i := range it {
		it[i] = &item{n: i}
	}
	for _, v := range it[:4] {
		l.PushBack(v)
	}
	if got := values(&l); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("after pushes: %v", got)
	}
	l.Remove(it[1]) // middle
	l.Remove(it[0]) // head
	l.Remove(it[3]) // tail
	if got := values(&l); !slices.Equal(got, []int{2}) {
		t.Fatalf("after removes: %v", got)
	}
	l.Remove(it[2])
	if !l.Empty() || l.tail != nil {
		t.Fatal("list not empty after removing all")
	}
	var o List[item, *item]
	o.PushBack(it[4])
	o.PushBack(it[5])
	l.PushBack(it[0])
	l.SpliceFront(&o)
	if got := values(&l); !slices.Equal(got, []int{4, 5, 0}) || !o.Empty() {
		t.Fatalf("after splice: %v, source empty %v", got, o.Empty())
	}
	var e List[item, *item]
	e.SpliceFront(&l)
	if got := values(&e); !slices.Equal(got, []int{4, 5, 0}) || !l.Empty() {
		t.Fatalf("splice into empty: %v", got)
	}
	all := e.TakeAll()
	if !e.Empty() || !slices.Equal(values(&all), []int{4, 5, 0}) {
		t.Fatal("TakeAll")
	}
}
