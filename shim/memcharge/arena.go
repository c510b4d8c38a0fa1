package memcharge

import (
	"errors"
	"fmt"
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
// Layout. The arena's file is cut into blocks of blockSize bytes. A block
// is a hole (no pages), free (pages the helper allocated, not in use), or
// a slab: objects of one size class, the free ones linked through their
// first four bytes (as the kernel's slab allocators do). The file is
// mapped into the shim in chunks: a chunk of chunkBlocks blocks holds the
// slabs; a text larger than a block gets a chunk of its own, exactly as
// many blocks as it needs, freed whole.
//
// Charging. A block becomes free only by the helper's fallocate (fill): a
// page the shim touches is always one the pod was charged for. Beyond
// keepFree free blocks, a freed block's pages are punched out (uncharged)
// and it becomes a hole again; the next fill reuses the holes first.
//
// Safety. The shim never faults on a text: a chunk stays mapped while any
// text in it is live. Close punches every page and closes the file, but
// unmaps a chunk only once its last live text is freed, so a text used
// after Close reads zeros. A text is freed exactly once, by its engine
// (ipcns.Resources.FreeText); a double free is detected only in so far as
// the object's class or block no longer match.
//
// Ballast.mu protects every field of an arena.

const (
	blockSize   = Granule
	chunkBlocks = 256 // 64 MiB of address space per chunk of slabs
	// keepFree is how many free blocks are kept filled for the next
	// texts, so that a queue filled and emptied in turn does not make a
	// helper round trip per block.
	keepFree = 3
	// maxArenaText is the largest text the arena holds (a chunk of its
	// own); larger ones (msgmax raised beyond it) go to the shim's heap,
	// charged to the ballast.
	maxArenaText = chunkBlocks * blockSize
)

// classSizes are the object sizes of slab blocks: kmalloc's small classes,
// then every page multiple up to a block.
var classSizes = func() []int32 {
	s := []int32{16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072}
	for n := int32(4096); n <= blockSize; n += 4096 {
		s = append(s, n)
	}
	return s
}()

// classOf returns the index of the smallest class that holds n bytes.
func classOf(n int) int {
	return sort.Search(len(classSizes), func(i int) bool { return int(classSizes[i]) >= n })
}

// errNotArena: the text cannot be held in the arena (it is closed, too
// large, or its pages could not be charged to the pod, the helper being
// gone); the caller keeps it in the heap instead.
var errNotArena = errors.New("memcharge: text not held in the arena")

const (
	blockHole = -2 // no pages
	blockFree = -1 // filled, not in use
	// a block with class >= 0 is a slab of classSizes[class], or with
	// class == bigClass, a chunk of its own.
	bigClass = 1 << 15
)

// block is a block's state in its chunk.
type block struct {
	class int32
	inuse int32  // live objects
	bump  int32  // objects never handed out start here
	free  uint32 // first free object + 1 (0: none); linked through the objects
	// partialOf is the class whose partial stack holds the block, or -1.
	partialOf int32
}

// chunk is one mapping of the arena's file.
type chunk struct {
	off    int64 // in the file
	mem    []byte
	blocks []block
	live   int // live texts, for unmapping after Close
}

// arena is a Ballast's message text store.
type arena struct {
	fd     int // -1 once closed
	chunks []*chunk
	next   int64 // file offset of the next chunk
	// free lists the free blocks, holes the punched ones of chunks of
	// slabs; both as (chunk, block) pairs.
	free, holes []blockRef
	// partial, per class, is a stack of slabs that may have free objects
	// (stale entries are skipped: block.partialOf says which are not).
	partial [][]blockRef
	filled  int64 // bytes of pages the helper allocated
	inuse   int64 // bytes of live texts
}

type blockRef struct {
	c *chunk
	i int32
}

func (r blockRef) b() *block { return &r.c.blocks[r.i] }

func (r blockRef) mem() []byte {
	o := int(r.i) * blockSize
	return r.c.mem[o : o+blockSize : o+blockSize]
}

func newArena(name string) (*arena, error) {
	fd, err := unix.MemfdCreate("ipc-text:"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	return &arena{fd: fd, partial: make([][]blockRef, len(classSizes))}, nil
}

// AllocText returns n bytes for a message text, in pages charged to the
// pod. It fails with ipcns.ErrNoMemory when the pod's memory cannot hold
// them, and with another error when the text should go to the heap (the
// arena is closed or its pages cannot be charged now).
func (b *Ballast) AllocText(n int) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.text
	if a == nil || a.fd < 0 || n <= 0 || n > maxArenaText {
		return nil, errNotArena
	}
	if n > blockSize {
		return b.allocBigLocked(n)
	}
	cl := classOf(n)
	r, err := b.slabLocked(cl)
	if err != nil {
		return nil, err
	}
	blk := r.b()
	size := int(classSizes[cl])
	var idx int
	if blk.free != 0 {
		idx = int(blk.free - 1)
		next := *(*uint32)(unsafe.Pointer(&r.mem()[idx*size]))
		if int(next) > blockSize/size {
			// The link was overwritten (a text written after its
			// free): drop the rest of the list rather than follow it.
			next = 0
		}
		blk.free = next
	} else {
		idx = int(blk.bump)
		blk.bump++
	}
	blk.inuse++
	r.c.live++
	a.inuse += int64(n)
	o := idx * size
	return r.mem()[o : o+n : o+n], nil
}

// slabLocked returns a slab of class cl with a free object.
func (b *Ballast) slabLocked(cl int) (blockRef, error) {
	a := b.text
	st := a.partial[cl]
	for len(st) > 0 {
		r := st[len(st)-1]
		blk := r.b()
		if blk.partialOf != int32(cl) {
			st = st[:len(st)-1] // stale
			continue
		}
		if blk.class == int32(cl) && (blk.free != 0 || int(blk.bump) < blockSize/int(classSizes[cl])) {
			a.partial[cl] = st
			return r, nil
		}
		blk.partialOf = -1
		st = st[:len(st)-1]
	}
	a.partial[cl] = st
	r, err := b.blockLocked()
	if err != nil {
		return blockRef{}, err
	}
	*r.b() = block{class: int32(cl), partialOf: int32(cl)}
	a.partial[cl] = append(a.partial[cl], r)
	return r, nil
}

// blockLocked returns a filled block: a free one, else a hole or a block
// of a new chunk, filled by the helper.
func (b *Ballast) blockLocked() (blockRef, error) {
	a := b.text
	if n := len(a.free); n > 0 {
		r := a.free[n-1]
		a.free = a.free[:n-1]
		return r, nil
	}
	var r blockRef
	if n := len(a.holes); n > 0 {
		r = a.holes[n-1]
	} else {
		c, err := a.mapChunk(chunkBlocks)
		if err != nil {
			return blockRef{}, err
		}
		for i := int32(chunkBlocks - 1); i >= 0; i-- {
			a.holes = append(a.holes, blockRef{c, i})
		}
		r = a.holes[len(a.holes)-1]
	}
	if err := b.fillTextLocked(r.c.off+int64(r.i)*blockSize, blockSize); err != nil {
		return blockRef{}, err
	}
	a.holes = a.holes[:len(a.holes)-1]
	*r.b() = block{class: blockFree, partialOf: -1}
	return r, nil
}

// allocBigLocked gives a text larger than a block a chunk of its own.
func (b *Ballast) allocBigLocked(n int) ([]byte, error) {
	a := b.text
	blocks := (n + blockSize - 1) / blockSize
	c, err := a.mapChunk(blocks)
	if err != nil {
		return nil, err
	}
	if err := b.fillTextLocked(c.off, int64(blocks)*blockSize); err != nil {
		a.unmap(c)
		return nil, err
	}
	c.blocks[0].class = bigClass
	c.live = 1
	a.inuse += int64(n)
	return c.mem[:n:n], nil
}

// fillTextLocked has the helper allocate the arena's pages [off,
// off+length): errNotArena if the pod cannot be charged now.
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
	b.text.filled += length
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
	c := &chunk{off: a.next, mem: mem, blocks: make([]block, blocks)}
	for i := range c.blocks {
		c.blocks[i] = block{class: blockHole, partialOf: -1}
	}
	a.next += size
	// Keep chunks sorted by address, for FreeText's lookup.
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
	if cap(t) == 0 {
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
	a.inuse -= int64(len(t))
	c.live--
	if a.fd < 0 {
		// Closed: the pages are gone; the mapping goes with its last text.
		if c.live == 0 {
			a.unmap(c)
		}
		return true
	}
	if c.blocks[0].class == bigClass {
		a.punch(c.off, int64(len(c.mem)))
		a.unmap(c)
		return true
	}
	o := int(p - chunkAddr(c))
	r := blockRef{c, int32(o / blockSize)}
	blk := r.b()
	if blk.class < 0 {
		return true // a double free: nothing to give back
	}
	size := int(classSizes[blk.class])
	idx := (o % blockSize) / size
	*(*uint32)(unsafe.Pointer(&r.mem()[idx*size])) = blk.free
	blk.free = uint32(idx + 1)
	blk.inuse--
	if blk.inuse == 0 {
		a.releaseBlock(r)
	} else if blk.partialOf != blk.class {
		blk.partialOf = blk.class
		a.partial[blk.class] = append(a.partial[blk.class], r)
	}
	return true
}

// releaseBlock makes an empty slab free, or a hole beyond keepFree.
func (a *arena) releaseBlock(r blockRef) {
	blk := r.b()
	if len(a.free) < keepFree {
		*blk = block{class: blockFree, partialOf: -1}
		a.free = append(a.free, r)
		return
	}
	a.punch(r.c.off+int64(r.i)*blockSize, blockSize)
	*blk = block{class: blockHole, partialOf: -1}
	a.holes = append(a.holes, r)
}

// punch gives pages of the file back (uncharging the pod).
func (a *arena) punch(off, length int64) {
	a.filled -= length
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
	a.filled = 0
	a.free, a.holes = nil, nil
	for i := range a.partial {
		a.partial[i] = nil
	}
	for _, c := range append([]*chunk(nil), a.chunks...) {
		if c.live == 0 {
			a.unmap(c)
		}
	}
}
