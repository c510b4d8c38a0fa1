package memcharge

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Message text in the pod's pages.
//
// A ballast charges the pod for what the engines hold, but the engines'
// objects themselves live in the shim's heap: without more, the host holds
// a pod's IPC memory twice, once charged to the pod (the ballast) and once
// in the shim (its copy). Message text is nearly all of that memory (a
// full queue is its msgmnb bytes of text and a few dozen bytes of record
// per message), so the text is not put in the heap at all: it lives in an
// arena, a second file of the ballast whose pages only the helper
// allocates, mapped into the shim. The pod is charged for the arena's
// pages, and the host holds them once.
//
// Layout. The file is mapped into the shim in chunks of chunkBlocks
// blocks of blockPages pages. A text of more than slabMax bytes takes a
// run of whole pages inside one block, as msg_msg takes whole pages for
// its segments; a smaller one takes an object of a one-page slab of its
// size class (kmalloc's classes), the free objects linked through their
// first two bytes. A text larger than a block gets a chunk of its own,
// freed whole.
//
// Charging. A page is used only after the helper allocated it (fill;
// fill.go says how): a page the shim touches is always one the pod was charged
// for. A fill covers the holes of a whole block, so that a filling queue
// makes one helper round trip per block, not per message. Freed pages
// stay allocated for the next texts up to keepFreePages; beyond that they
// are punched out of the file at once (uncharged). So what the pod is
// charged for beyond its texts is the free room of its slab pages (as
// with the kernel's slabs), the page rounding of larger texts (as
// msg_msg's), and at most keepFreePages plus one block's fill.
//
// Safety. The shim never faults on a text: a chunk stays mapped while
// any text in it is live. Close punches every page and closes the file,
// but unmaps a chunk only once its last live text is freed, so a text
// used after Close reads zeros (a page touched then is allocated anew,
// charged to the shim). A text is freed exactly once, by its engine
// (ipcns.Resources.FreeText).
//
// Ballast.mu protects every field of an arena.

const (
	pageSize    = 4096
	blockPages  = 64 // a block's pages are the bits of a uint64
	blockSize   = blockPages * pageSize
	chunkBlocks = 256 // 64 MiB of address space per chunk
	// slabMax is the largest text kept in a slab; larger ones take whole
	// pages.
	slabMax = 2048
	// keepFreePages is how many freed pages stay allocated for the next
	// texts, so that a queue filled and emptied in turn does not make a
	// helper round trip per message.
	keepFreePages = blockPages
	// maxArenaText is the largest text the arena holds (a chunk of its
	// own); larger ones (msgmax raised beyond it) go to the shim's heap,
	// charged to the ballast.
	maxArenaText = chunkBlocks * blockSize
	// maxBigChunks bounds the chunks of their own (a mapping each,
	// against vm.max_map_count); beyond it large texts go to the heap.
	maxBigChunks = 1024
)

// classSizes are the object sizes of slab pages: kmalloc's small classes.
var classSizes = [...]uint16{16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048}

// classOf returns the index of the smallest class that holds n bytes.
func classOf(n int) int {
	return sort.Search(len(classSizes), func(i int) bool { return int(classSizes[i]) >= n })
}

// errNotArena: the text cannot be held in the arena (it is closed, too
// large, or its pages could not be charged to the pod, the helper being
// gone); the caller keeps it in the heap instead.
var errNotArena = errors.New("memcharge: text not held in the arena")

// block is the state of a block's pages: bit i is page i.
type block struct {
	used   uint64 // in a text's run or a slab
	filled uint64 // allocated by the helper, not punched since
}

// slab is the state of a page used as a slab (class >= 0).
type slab struct {
	class     int8 // -1: not a slab
	partialOf int8 // the class whose partial stack holds the page, or -1
	inuse     uint16
	bump      uint16 // objects never handed out start here
	free      uint16 // first free object + 1 (0: none); linked through the objects
}

// chunk is one mapping of the arena's file.
type chunk struct {
	off    int64 // in the file
	mem    []byte
	blocks []block
	slabs  []slab // per page
	big    bool   // one text's chunk of its own
	live   int    // live texts, for unmapping after Close
	// Summaries for findRun, bit i%64 of word i/64 for block i: notFull,
	// the blocks with a page not used; spare, those with a page filled
	// and not used.
	notFull, spare [chunkBlocks / 64]uint64
	// runs, per page, is the length of the live run text that starts
	// there (0: none); objs, per slab page, its objects handed out: what
	// FreeText checks a text against before giving it back.
	runs []uint8
	objs map[int32]*[4]uint64
}

// sync updates the summaries of block i.
func (c *chunk) sync(i int) {
	w, bit := i/64, uint64(1)<<(i%64)
	blk := &c.blocks[i]
	c.notFull[w] &^= bit
	c.spare[w] &^= bit
	if blk.used != ^uint64(0) {
		c.notFull[w] |= bit
	}
	if blk.filled&^blk.used != 0 {
		c.spare[w] |= bit
	}
}

// pageRef names a page of a chunk.
type pageRef struct {
	c *chunk
	p int32
}

func (r pageRef) mem() []byte {
	o := int(r.p) * pageSize
	return r.c.mem[o : o+pageSize : o+pageSize]
}

// arena is a Ballast's message text store.
type arena struct {
	fd     int // -1 once closed
	chunks []*chunk
	next   int64 // file offset of the next chunk
	bigs   int   // live chunks of their own
	// partial, per class, is a stack of slab pages that may have free
	// objects (stale entries are skipped: slab.partialOf says which are
	// not).
	partial   [len(classSizes)][]pageRef
	filled    int64 // bytes of pages the helper allocated
	inuse     int64 // bytes of live texts
	freePages int   // pages filled and not used
}

func newArena(name string) (*arena, error) {
	fd, err := unix.MemfdCreate("ipc-text:"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	return &arena{fd: fd}, nil
}

// AllocText returns n bytes for a message text, in pages charged to the
// pod. With grow false it only takes pages already allocated (no helper
// round trip, no reclaim in the pod). It fails with ipcns.ErrNoMemory
// when the pod's memory cannot hold them, and with another error when the
// text should go to the heap (the arena is closed, or its pages cannot be
// charged now) or, without grow, when it would have to grow.
func (b *Ballast) AllocText(n int, grow bool) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.text
	if a == nil || a.fd < 0 || n <= 0 || n > maxArenaText {
		return nil, errNotArena
	}
	if n > blockSize {
		if !grow || a.bigs >= maxBigChunks {
			return nil, errNotArena
		}
		return b.allocBigLocked(n)
	}
	if n > slabMax {
		r, err := b.pagesLocked((n+pageSize-1)/pageSize, grow)
		if err != nil {
			return nil, err
		}
		r.c.live++
		r.c.runs[r.p] = uint8((n + pageSize - 1) / pageSize)
		a.inuse += int64(n)
		return r.c.mem[int(r.p)*pageSize:][:n:n], nil
	}
	cl := classOf(n)
	r, err := b.slabLocked(cl, grow)
	if err != nil {
		return nil, err
	}
	s := &r.c.slabs[r.p]
	size := int(classSizes[cl])
	var idx int
	if s.free != 0 {
		idx = int(s.free - 1)
		next := *(*uint16)(unsafe.Pointer(&r.mem()[idx*size]))
		if int(next) > pageSize/size {
			next = 0 // the link was overwritten: drop the rest of the list
		}
		s.free = next
	} else {
		idx = int(s.bump)
		s.bump++
	}
	s.inuse++
	r.c.live++
	objs := r.c.objs[r.p]
	if objs == nil {
		objs = new([4]uint64)
		r.c.objs[r.p] = objs
	}
	objs[idx/64] |= 1 << (idx % 64)
	a.inuse += int64(n)
	o := idx * size
	return r.mem()[o : o+n : o+n], nil
}

// slabLocked returns a slab page of class cl with a free object.
func (b *Ballast) slabLocked(cl int, grow bool) (pageRef, error) {
	a := b.text
	st := a.partial[cl]
	for len(st) > 0 {
		r := st[len(st)-1]
		s := &r.c.slabs[r.p]
		if s.partialOf == int8(cl) {
			if s.class == int8(cl) && (s.free != 0 || int(s.bump) < pageSize/int(classSizes[cl])) {
				a.partial[cl] = st
				return r, nil
			}
			s.partialOf = -1
		}
		st = st[:len(st)-1] // full, or stale
	}
	a.partial[cl] = st
	r, err := b.pagesLocked(1, grow)
	if err != nil {
		return pageRef{}, err
	}
	r.c.slabs[r.p] = slab{class: int8(cl), partialOf: int8(cl)}
	a.partial[cl] = append(a.partial[cl], r)
	return r, nil
}

// pagesLocked returns the first of k free pages in a row inside a block,
// allocated by the helper: pages that are already allocated if there are,
// else (with grow) a block's holes filled, else a new chunk's.
func (b *Ballast) pagesLocked(k int, grow bool) (pageRef, error) {
	a := b.text
	if r, ok := a.findRun(k, true); ok {
		return r, nil
	}
	if !grow {
		return pageRef{}, errNotArena
	}
	r, ok := a.findRun(k, false)
	if !ok {
		c, err := a.mapChunk(chunkBlocks)
		if err != nil {
			return pageRef{}, err
		}
		r = pageRef{c, 0}
		a.take(r, k)
	}
	// Fill the holes of the whole block: one round trip for the texts
	// that will follow this one.
	blk := &r.c.blocks[int(r.p)/blockPages]
	holes := ^blk.filled
	blockOff := r.c.off + int64(int(r.p)/blockPages)*blockSize
	if err := b.fillTextLocked(blockOff, blockSize); err != nil {
		a.untake(r, k)
		// What a helper that failed may have allocated: the former
		// holes only (the block's other pages may hold live texts).
		a.punchMask(blockOff, holes)
		return pageRef{}, err
	}
	blk.filled = ^uint64(0)
	r.c.sync(int(r.p) / blockPages)
	added := bits.OnesCount64(holes)
	a.filled += int64(added) * pageSize
	// The run's pages were taken; the block's other holes are free now.
	a.freePages += added - bits.OnesCount64(holes&runMask(int(r.p)%blockPages, k))
	if a.freePages > keepFreePages+blockPages {
		a.trim(r.c, int(r.p)/blockPages)
	}
	return r, nil
}

// findRun finds k free pages in a row inside one block and takes them;
// with filled, only pages already allocated.
func (a *arena) findRun(k int, filled bool) (pageRef, bool) {
	if filled && a.freePages < k {
		return pageRef{}, false
	}
	for _, c := range a.chunks {
		if c.big {
			continue
		}
		sum := &c.notFull
		if filled {
			sum = &c.spare
		}
		for w, word := range sum {
			for word != 0 {
				i := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				blk := &c.blocks[i]
				free := ^blk.used
				if filled {
					free &= blk.filled
				}
				if bits.OnesCount64(free) < k {
					continue
				}
				if j, ok := runStart(free, k); ok {
					r := pageRef{c, int32(i*blockPages + j)}
					a.take(r, k)
					return r, true
				}
			}
		}
	}
	return pageRef{}, false
}

// trim punches the free pages of blocks other than block bi of c until
// at most keepFreePages are free.
func (a *arena) trim(c0 *chunk, bi int) {
	for _, c := range a.chunks {
		if c.big {
			continue
		}
		for w, word := range c.spare {
			for word != 0 {
				if a.freePages <= keepFreePages {
					return
				}
				i := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if c == c0 && i == bi {
					continue
				}
				blk := &c.blocks[i]
				m := blk.filled &^ blk.used
				a.punchMask(c.off+int64(i)*blockSize, m)
				blk.filled &^= m
				n := bits.OnesCount64(m)
				a.freePages -= n
				a.filled -= int64(n) * pageSize
				c.sync(i)
			}
		}
	}
}

// take marks k pages from r used.
func (a *arena) take(r pageRef, k int) {
	blk := &r.c.blocks[int(r.p)/blockPages]
	m := runMask(int(r.p)%blockPages, k)
	blk.used |= m
	a.freePages -= bits.OnesCount64(m & blk.filled)
	r.c.sync(int(r.p) / blockPages)
}

// untake marks k pages from r free again.
func (a *arena) untake(r pageRef, k int) {
	blk := &r.c.blocks[int(r.p)/blockPages]
	m := runMask(int(r.p)%blockPages, k)
	blk.used &^= m
	a.freePages += bits.OnesCount64(m & blk.filled)
	r.c.sync(int(r.p) / blockPages)
}

// runMask is the bits of k pages from page j of a block.
func runMask(j, k int) uint64 {
	if k == blockPages {
		return ^uint64(0)
	}
	return (uint64(1)<<k - 1) << j
}

// runStart returns the lowest j such that bits j..j+k-1 of free are set.
func runStart(free uint64, k int) (int, bool) {
	m := free
	for s := 1; s < k; {
		t := min(s, k-s)
		m &= m >> t
		s += t
	}
	if m == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(m), true
}

// allocBigLocked gives a text larger than a block a chunk of its own.
func (b *Ballast) allocBigLocked(n int) ([]byte, error) {
	a := b.text
	blocks := (n + blockSize - 1) / blockSize
	c, err := a.mapChunk(blocks)
	if err != nil {
		return nil, err
	}
	c.big = true
	if err := b.fillTextLocked(c.off, int64(blocks)*blockSize); err != nil {
		a.punch(c.off, int64(blocks)*blockSize)
		a.unmap(c)
		return nil, err
	}
	a.filled += int64(blocks) * blockSize
	a.bigs++
	c.live = 1
	a.inuse += int64(n)
	return c.mem[:n:n], nil
}

// fillTextLocked has the helper allocate the arena's pages [off,
// off+length) (those not yet allocated): errNotArena if the pod cannot be
// charged now.
func (b *Ballast) fillTextLocked(off, length int64) error {
	if time.Now().Before(b.unbackedUntil) {
		return errNotArena
	}
	backed, err := b.fillLocked(fileText, off, length)
	if err != nil {
		return err
	}
	if !backed {
		return errNotArena
	}
	return nil
}

// mapChunk maps the next blocks blocks of the file, as holes.
func (a *arena) mapChunk(blocks int) (*chunk, error) {
	size := int64(blocks) * blockSize
	if err := unix.Ftruncate(a.fd, a.next+size); err != nil {
		return nil, fmt.Errorf("%w: grow the text file: %v", errNotArena, err)
	}
	mem, err := unix.Mmap(a.fd, a.next, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: map the text file: %v", errNotArena, err)
	}
	// Where shmem THP is on, khugepaged would collapse the pages this
	// mapping sees into huge folios, holes and all, charging the pod for
	// them (fill.go). An error means a kernel without THP.
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
	c := &chunk{off: a.next, mem: mem, blocks: make([]block, blocks), slabs: make([]slab, blocks*blockPages),
		runs: make([]uint8, blocks*blockPages), objs: map[int32]*[4]uint64{}}
	for i := range c.slabs {
		c.slabs[i] = slab{class: -1, partialOf: -1}
	}
	for i := range c.blocks {
		c.sync(i)
	}
	a.next += size
	// Chunks are kept sorted by address, for FreeText's lookup.
	i := sort.Search(len(a.chunks), func(i int) bool { return chunkAddr(a.chunks[i]) > chunkAddr(c) })
	a.chunks = append(a.chunks, nil)
	copy(a.chunks[i+1:], a.chunks[i:])
	a.chunks[i] = c
	return c, nil
}

// unmap drops chunk c (its pages are already punched or never filled).
func (a *arena) unmap(c *chunk) {
	for i, x := range a.chunks {
		if x == c {
			a.chunks = append(a.chunks[:i], a.chunks[i+1:]...)
			break
		}
	}
	_ = unix.Munmap(c.mem)
	c.mem = nil
}

func chunkAddr(c *chunk) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(c.mem))) }

// chunkOf returns the chunk holding p, or nil.
func (a *arena) chunkOf(p uintptr) *chunk {
	i := sort.Search(len(a.chunks), func(i int) bool { return chunkAddr(a.chunks[i]) > p }) - 1
	if i < 0 {
		return nil
	}
	c := a.chunks[i]
	if p-chunkAddr(c) >= uintptr(len(c.mem)) {
		return nil
	}
	return c
}

// FreeText gives back a text AllocText returned, and reports false if t
// is not the arena's (a heap text).
func (b *Ballast) FreeText(t []byte) bool {
	if len(t) == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.text
	if a == nil {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(t)))
	c := a.chunkOf(p)
	if c == nil {
		return false
	}
	o := int(p - chunkAddr(c))
	if c.big {
		if o != 0 || c.live != 1 {
			b.logf("memcharge: FreeText of %d bytes at %d of a chunk of its own: not a live text", len(t), o)
			return true
		}
		a.bigs--
		if a.fd >= 0 {
			a.punch(c.off, int64(len(c.mem)))
			a.filled -= int64(len(c.mem))
		}
		a.inuse -= int64(len(t))
		c.live = 0
		a.unmap(c)
		return true
	}
	r := pageRef{c, int32(o / pageSize)}
	if len(t) > slabMax {
		k := (len(t) + pageSize - 1) / pageSize
		if o%pageSize != 0 || int(c.runs[r.p]) != k {
			b.logf("memcharge: FreeText of %d bytes at %d: not a live text (a double free?)", len(t), o)
			return true
		}
		c.runs[r.p] = 0
		a.freeRun(r, k)
		a.release(c, len(t))
		return true
	}
	s := &c.slabs[r.p]
	objs := c.objs[r.p]
	var idx int
	if s.class >= 0 {
		size := int(classSizes[s.class])
		idx = (o % pageSize) / size
		if (o%pageSize)%size != 0 {
			objs = nil
		}
	}
	if s.class < 0 || objs == nil || objs[idx/64]&(1<<(idx%64)) == 0 {
		b.logf("memcharge: FreeText of %d bytes at %d: not a live text (a double free?)", len(t), o)
		return true
	}
	objs[idx/64] &^= 1 << (idx % 64)
	size := int(classSizes[s.class])
	if a.fd >= 0 {
		*(*uint16)(unsafe.Pointer(&r.mem()[idx*size])) = s.free
		s.free = uint16(idx + 1)
	}
	s.inuse--
	switch {
	case s.inuse == 0:
		*s = slab{class: -1, partialOf: -1}
		delete(c.objs, r.p)
		a.freeRun(r, 1)
	case s.partialOf != s.class:
		s.partialOf = s.class
		a.partial[s.class] = append(a.partial[s.class], r)
	}
	a.release(c, len(t))
	return true
}

// release counts a text of n bytes of chunk c gone; after Close, the
// chunk goes with its last text.
func (a *arena) release(c *chunk, n int) {
	a.inuse -= int64(n)
	c.live--
	if a.fd < 0 && c.live == 0 {
		a.unmap(c)
	}
}

// freeRun frees k pages from r: kept allocated up to keepFreePages,
// punched beyond.
func (a *arena) freeRun(r pageRef, k int) {
	a.untake(r, k)
	if a.fd < 0 || a.freePages <= keepFreePages {
		return
	}
	blk := &r.c.blocks[int(r.p)/blockPages]
	m := runMask(int(r.p)%blockPages, k) & blk.filled
	blk.filled &^= m
	r.c.sync(int(r.p) / blockPages)
	n := bits.OnesCount64(m)
	a.freePages -= n
	a.filled -= int64(n) * pageSize
	a.punch(r.c.off+int64(r.p)*pageSize, int64(k)*pageSize)
}

// punchMask punches the pages of the block at off whose bits are set.
func (a *arena) punchMask(off int64, m uint64) {
	for m != 0 {
		j := bits.TrailingZeros64(m)
		k := bits.TrailingZeros64(^(m >> j)) // the run of set bits from j
		if j+k > blockPages {
			k = blockPages - j
		}
		a.punch(off+int64(j)*pageSize, int64(k)*pageSize)
		m &^= runMask(j, k)
	}
}

// punch gives pages of the file back (uncharging the pod); the caller
// counts them off filled.
func (a *arena) punch(off, length int64) {
	_ = unix.Fallocate(a.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
}

// close frees the arena's pages and file; chunks with live texts stay
// mapped (reading zeros) until their last text is freed.
func (a *arena) close() {
	if a.fd < 0 {
		return
	}
	_ = unix.Fallocate(a.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, a.next)
	unix.Close(a.fd)
	a.fd = -1
	a.filled, a.freePages = 0, 0
	for _, c := range a.chunks {
		for i := range c.blocks {
			c.blocks[i].filled = 0 // punched: freeing a text after Close counts no free page
			c.sync(i)
		}
	}
	for i := range a.partial {
		a.partial[i] = nil
	}
	for _, c := range append([]*chunk(nil), a.chunks...) {
		if c.live == 0 {
			a.unmap(c)
		}
	}
}
