package msgengine

import "unsafe"

// msg is one queued message, struct msg_msg without its type, which its
// list holds. It is 32 bytes; the text is a separate allocation, the one
// msgsnd was given (ipcns.Resources.AllocText: outside the heap when the
// namespace's account can hold texts).
type msg struct {
	next *msg   // the next message of the same type; protected by Queue.mu
	seq  uint64 // position in the queue's arrival order
	data *byte  // first byte of the text, nil when it is empty
	size int64
}

func (m *msg) text() []byte { return unsafe.Slice(m.data, m.size) }

// typeList is the FIFO of the queued messages of one type.
type typeList struct {
	typ        int64
	head, tail *msg
	idx        [2]int32 // positions in store.heaps[bySeq] and [byType]
}

// Heap orders of typeLists.
const (
	bySeq  = 0 // by the sequence number of the list's first message
	byType = 1 // by type
)

// tlHeap is a binary min-heap of typeLists in one of the two orders.
type tlHeap struct {
	order int
	a     []*typeList
}

func (h *tlHeap) less(i, j int) bool {
	if h.order == bySeq {
		return h.a[i].head.seq < h.a[j].head.seq
	}
	return h.a[i].typ < h.a[j].typ
}

func (h *tlHeap) swap(i, j int) {
	h.a[i], h.a[j] = h.a[j], h.a[i]
	h.a[i].idx[h.order] = int32(i)
	h.a[j].idx[h.order] = int32(j)
}

func (h *tlHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *tlHeap) down(i int) {
	n := len(h.a)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

func (h *tlHeap) push(t *typeList) {
	t.idx[h.order] = int32(len(h.a))
	h.a = append(h.a, t)
	h.up(len(h.a) - 1)
}

func (h *tlHeap) remove(t *typeList) {
	i := int(t.idx[h.order])
	last := len(h.a) - 1
	if i != last {
		h.swap(i, last)
	}
	h.a[last] = nil
	h.a = h.a[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// store is a queue's messages (msq->q_messages), indexed by type.
type store struct {
	types   map[int64]*typeList
	heaps   [2]tlHeap
	spare   *typeList // an empty list kept for reuse, so ping-pong allocates none
	nextSeq uint64
}

func (s *store) init() {
	s.heaps[bySeq].order = bySeq
	s.heaps[byType].order = byType
}

// push appends a message of type typ (list_add_tail on q_messages).
func (s *store) push(typ int64, text []byte) {
	m := &msg{seq: s.nextSeq, size: int64(len(text))}
	if len(text) > 0 {
		m.data = unsafe.SliceData(text)
	}
	s.nextSeq++
	t := s.types[typ]
	if t == nil {
		if s.types == nil {
			s.types = make(map[int64]*typeList)
		}
		t = s.spare
		s.spare = nil
		if t == nil {
			t = new(typeList)
		}
		t.typ = typ
		t.head, t.tail = m, m
		s.types[typ] = t
		s.heaps[bySeq].push(t)
		s.heaps[byType].push(t)
		return
	}
	t.tail.next = m
	t.tail = m
}

// popHead removes and returns the first message of t, dropping t when it
// becomes empty.
func (s *store) popHead(t *typeList) *msg {
	m := t.head
	t.head = m.next
	m.next = nil
	if t.head != nil {
		s.heaps[bySeq].down(int(t.idx[bySeq]))
		return m
	}
	t.tail = nil
	s.heaps[bySeq].remove(t)
	s.heaps[byType].remove(t)
	delete(s.types, t.typ)
	s.spare = t
	return m
}

// Search modes of find (SEARCH_* in ipc/msg.c).
const (
	searchAny       = 1
	searchEqual     = 2
	searchNotEqual  = 3
	searchLessEqual = 4
	searchNumber    = 5
)

// find returns the list whose first message is the one find_msg would
// pick for mode and typ (typ already made positive for searchLessEqual),
// or nil. It is not for searchNumber.
func (s *store) find(mode int, typ int64) *typeList {
	h := s.heaps[bySeq].a
	switch mode {
	case searchAny:
		if len(h) > 0 {
			return h[0]
		}
	case searchEqual:
		return s.types[typ]
	case searchNotEqual:
		// The first message of another type heads the oldest list of
		// another type: the root, or else the older of its children.
		if len(h) == 0 {
			return nil
		}
		if h[0].typ != typ {
			return h[0]
		}
		var best *typeList
		for i := 1; i <= 2 && i < len(h); i++ {
			if best == nil || h[i].head.seq < best.head.seq {
				best = h[i]
			}
		}
		return best
	case searchLessEqual:
		// The lowest type present, if it is <= typ; the first of that
		// type, as find_msg's narrowing scan ends on.
		if t := s.heaps[byType].a; len(t) > 0 && t[0].typ <= typ {
			return t[0]
		}
	}
	return nil
}

// nth returns the message at position n in arrival order and its type
// (MSG_COPY's SEARCH_NUMBER), or nil. It merges the type lists, in
// O(n × types): MSG_COPY is for checkpointing, where Linux walks too.
func (s *store) nth(n int64, qnum int64) (*msg, int64) {
	if n < 0 || n >= qnum {
		return nil, 0
	}
	type cursor struct {
		m   *msg
		typ int64
	}
	cur := make([]cursor, 0, len(s.heaps[bySeq].a))
	for _, t := range s.heaps[bySeq].a {
		cur = append(cur, cursor{t.head, t.typ})
	}
	for {
		best := 0
		for i := range cur {
			if cur[i].m != nil && (cur[best].m == nil || cur[i].m.seq < cur[best].m.seq) {
				best = i
			}
		}
		if cur[best].m == nil {
			return nil, 0
		}
		if n == 0 {
			return cur[best].m, cur[best].typ
		}
		n--
		cur[best].m = cur[best].m.next
	}
}

// each calls f for every message, in no particular order.
func (s *store) each(f func(*msg)) {
	for _, t := range s.types {
		for m := t.head; m != nil; m = m.next {
			f(m)
		}
	}
}

// clear drops every message.
func (s *store) clear() {
	s.types = nil
	s.heaps[bySeq].a = nil
	s.heaps[byType].a = nil
	s.spare = nil
}
