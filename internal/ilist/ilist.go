// Package ilist is an intrusive, doubly linked FIFO, the kernel's list_head
// as the engines' wait queues use it: a value carries its own links (it
// embeds Entry), so adding and removing allocate nothing, and a value
// leaves from anywhere in the list in O(1), as a signalled or timed-out
// sleeper does.
//
// A List is not safe for concurrent use; the engines guard each one with
// the lock of the object it belongs to.
package ilist

// Entry holds a value's links. Embed it in the value's struct; a value is
// on at most one List at a time.
type Entry[T any] struct {
	prev, next *T
}

// Next returns the value after this one in its List, or nil.
func (e *Entry[T]) Next() *T { return e.next }

func (e *Entry[T]) entry() *Entry[T] { return e }

// Elem is a pointer to a value whose struct embeds Entry[T].
type Elem[T any] interface {
	*T
	entry() *Entry[T]
}

// List is a FIFO of values. The zero value is an empty list.
type List[T any, P Elem[T]] struct {
	head, tail P
}

// Empty reports whether l holds no value.
func (l *List[T, P]) Empty() bool { return l.head == nil }

// Front returns the first value, or nil.
func (l *List[T, P]) Front() P { return l.head }

// PushBack appends v (list_add_tail).
func (l *List[T, P]) PushBack(v P) {
	e := v.entry()
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.entry().next = v
	} else {
		l.head = v
	}
	l.tail = v
}

// Remove unlinks v, which must be on l (list_del).
func (l *List[T, P]) Remove(v P) {
	e := v.entry()
	if e.prev != nil {
		P(e.prev).entry().next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		P(e.next).entry().prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// SpliceFront moves every value of o, in order, to the front of l and
// leaves o empty (list_splice_init).
func (l *List[T, P]) SpliceFront(o *List[T, P]) {
	if o.head == nil {
		return
	}
	o.tail.entry().next = l.head
	if l.head != nil {
		l.head.entry().prev = o.tail
	} else {
		l.tail = o.tail
	}
	l.head = o.head
	o.head, o.tail = nil, nil
}

// TakeAll empties l and returns what it held, in order.
func (l *List[T, P]) TakeAll() List[T, P] {
	o := *l
	l.head, l.tail = nil, nil
	return o
}
