package undo

import (
	"math/rand"
	"testing"
)

type set struct {
	name  string
	chain Chain
}

func chainOf(c *Chain) []*Entry {
	var out []*Entry
	c.Each(func(e *Entry) { out = append(out, e) })
	return out
}

func TestAttachFindDetach(t *testing.T) {
	l := NewList(nil)
	a, b := &set{name: "a"}, &set{name: "b"}
	ea := l.Attach(a, 3, &a.chain)
	if ea == nil || len(ea.Adj) != 3 || ea.Set() != a {
		t.Fatalf("attach: %+v", ea)
	}
	if again := l.Attach(a, 3, &a.chain); again != ea {
		t.Fatal("a second Attach made a second entry")
	}
	eb := l.Attach(b, 1, &b.chain)
	if l.Find(a) != ea || l.Find(b) != eb || l.Find(&set{}) != nil {
		t.Fatal("Find")
	}
	if l.Len() != 2 || a.chain.Len() != 1 || b.chain.Len() != 1 {
		t.Fatalf("lens %d %d %d", l.Len(), a.chain.Len(), b.chain.Len())
	}
	if !ea.Detach(&a.chain) || ea.Detach(&a.chain) {
		t.Fatal("Detach must report true once")
	}
	if l.Find(a) != nil || a.chain.Len() != 0 || len(chainOf(&a.chain)) != 0 || l.Len() != 1 {
		t.Fatal("detached entry still linked")
	}
	// A set removed and made again gets a fresh entry: entries name sets
	// by pointer, not id.
	a2 := &set{name: "a"}
	if e := l.Attach(a2, 3, &a2.chain); e == ea || e.Set() != a2 {
		t.Fatal("entry of a removed set reused")
	}
}

// Exit returns the entries newest first (list_add_rcu order) and closes
// the list to new entries.
func TestExit(t *testing.T) {
	l := NewList(nil)
	sets := []*set{{name: "0"}, {name: "1"}, {name: "2"}}
	for _, s := range sets {
		l.Attach(s, 1, &s.chain)
	}
	got := l.Exit()
	if len(got) != 3 {
		t.Fatalf("%d entries", len(got))
	}
	for i, e := range got {
		if e.Set() != sets[2-i] {
			t.Fatalf("entry %d is of set %v", i, e.Set().(*set).name)
		}
	}
	s := &set{}
	if l.Attach(s, 1, &s.chain) != nil || s.chain.Len() != 0 {
		t.Fatal("an exited list took an entry")
	}
	// The engine detaches what it applied.
	for _, e := range got {
		e.Detach(&e.Set().(*set).chain)
	}
	if l.Len() != 0 {
		t.Fatal("entries left")
	}
}

// Each lets the callback detach the entry it is given (freeary).
func TestChainEachDetach(t *testing.T) {
	s := &set{}
	var lists []*List
	for i := 0; i < 5; i++ {
		l := NewList(nil)
		l.Attach(s, 2, &s.chain)
		lists = append(lists, l)
	}
	n := 0
	s.chain.Each(func(e *Entry) {
		n++
		e.Detach(&s.chain)
	})
	if n != 5 || s.chain.Len() != 0 {
		t.Fatalf("visited %d, %d left", n, s.chain.Len())
	}
	for _, l := range lists {
		if l.Len() != 0 {
			t.Fatal("list still holds a freed set's entry")
		}
	}
}

// Random attaches, detaches and exits against a model: every entry is on
// exactly its list and its set's chain, and counts agree.
func TestRandomAgainstModel(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	sets := make([]*set, 6)
	for i := range sets {
		sets[i] = &set{}
	}
	lists := make([]*List, 5)
	for i := range lists {
		lists[i] = NewList(nil)
	}
	type key struct{ l, s int }
	model := map[key]*Entry{}
	exited := map[int]bool{}
	for step := 0; step < 20000; step++ {
		li, si := r.Intn(len(lists)), r.Intn(len(sets))
		l, s := lists[li], sets[si]
		switch op := r.Intn(10); {
		case op < 6:
			e := l.Attach(s, 1, &s.chain)
			if exited[li] {
				if e != nil {
					t.Fatal("exited list attached")
				}
				continue
			}
			if m := model[key{li, si}]; m != nil && m != e {
				t.Fatal("Attach made a duplicate")
			}
			model[key{li, si}] = e
		case op < 9:
			if e := model[key{li, si}]; e != nil {
				if !e.Detach(&s.chain) {
					t.Fatal("linked entry not detached")
				}
				delete(model, key{li, si})
			}
		default:
			if r.Intn(20) == 0 && !exited[li] {
				exited[li] = true
				for _, e := range l.Exit() {
					e.Detach(&e.Set().(*set).chain)
				}
				for k := range model {
					if k.l == li {
						delete(model, k)
					}
				}
			}
		}
	}
	for li, l := range lists {
		n := 0
		for k, e := range model {
			if k.l == li {
				n++
				if l.Find(sets[k.s]) != e {
					t.Fatal("Find disagrees with the model")
				}
			}
		}
		if l.Len() != n {
			t.Fatalf("list %d: %d entries, model %d", li, l.Len(), n)
		}
	}
	for si, s := range sets {
		n := 0
		for k := range model {
			if k.s == si {
				n++
			}
		}
		if s.chain.Len() != n || len(chainOf(&s.chain)) != n {
			t.Fatalf("set %d: chain %d (%d walked), model %d", si, s.chain.Len(), len(chainOf(&s.chain)), n)
		}
	}
}
