package memcharge

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// arenaText is a live text of the invariant test: its bytes hold a
// pattern of id.
type arenaText struct {
	id int
	t  []byte
}

func textAddr(t []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(t))) }

// checkArena checks the arena's bookkeeping against the live texts and
// against the file: it returns the first inconsistency, or nil. b.mu must
// not be held.
//
// While the arena is open:
//   - every live text is in a mapped chunk, at a place its size gives it
//     (a chunk of its own, a page run inside one block, an object of the
//     slab of its class), and no two overlap;
//   - each block's used bits are exactly its runs' and slab pages' pages,
//     and used is a subset of filled (a page the shim touches is charged);
//   - a.filled is the filled bits (and the chunks of their own) in bytes,
//     and equals the file's allocated bytes (fstat st_blocks); every page
//     the arena counts as filled is in the file, and no other (mincore);
//   - a.freePages is the popcount of filled&^used;
//   - a.inuse, c.live and a.bigs count the live texts;
//   - a slab page's objects: inuse live ones, the free list (distinct,
//     below bump, none live) and bump agree, and a page with room is on
//     its class's partial stack.
//
// After Close: only chunks with live texts stay mapped, and the counts of
// live texts still hold.
func checkArena(b *Ballast, live map[uintptr]arenaText) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.text
	open := a.fd >= 0

	type runInfo struct {
		used  []uint64         // per block: pages of run texts
		objs  map[int32][]bool // per slab page: live objects
		live  int
		bytes int64
	}
	info := map[*chunk]*runInfo{}
	for _, c := range a.chunks {
		if c.mem == nil {
			return fmt.Errorf("chunk at %d in the list but unmapped", c.off)
		}
		info[c] = &runInfo{used: make([]uint64, len(c.blocks)), objs: map[int32][]bool{}}
	}
	var inuse int64
	for p, x := range live {
		c := a.chunkOf(p)
		if c == nil {
			return fmt.Errorf("text %d (%d bytes) in no mapped chunk", x.id, len(x.t))
		}
		ri := info[c]
		ri.live++
		ri.bytes += int64(len(x.t))
		inuse += int64(len(x.t))
		o := int(p - chunkAddr(c))
		if o+len(x.t) > len(c.mem) {
			return fmt.Errorf("text %d (%d bytes at %d) beyond its chunk (%d bytes)", x.id, len(x.t), o, len(c.mem))
		}
		switch {
		case c.big:
			if o != 0 || len(x.t) <= blockSize || len(c.mem) != (len(x.t)+blockSize-1)/blockSize*blockSize {
				return fmt.Errorf("text %d (%d bytes) at %d of a chunk of its own of %d bytes", x.id, len(x.t), o, len(c.mem))
			}
			if ri.live != 1 {
				return fmt.Errorf("chunk of its own with %d texts", ri.live)
			}
		case len(x.t) > slabMax:
			if len(x.t) > blockSize {
				return fmt.Errorf("text %d of %d bytes in a shared chunk", x.id, len(x.t))
			}
			if o%pageSize != 0 {
				return fmt.Errorf("run text %d at %d, not a page start", x.id, o)
			}
			pg := o / pageSize
			j, k := pg%blockPages, (len(x.t)+pageSize-1)/pageSize
			if j+k > blockPages {
				return fmt.Errorf("run text %d: pages %d..%d cross a block", x.id, pg, pg+k-1)
			}
			m := runMask(j, k)
			if ri.used[pg/blockPages]&m != 0 {
				return fmt.Errorf("run text %d overlaps another run", x.id)
			}
			ri.used[pg/blockPages] |= m
		default:
			pg := int32(o / pageSize)
			s := c.slabs[pg]
			if s.class < 0 {
				return fmt.Errorf("slab text %d (%d bytes) in page %d that is not a slab", x.id, len(x.t), pg)
			}
			if int(s.class) != classOf(len(x.t)) {
				return fmt.Errorf("slab text %d of %d bytes in a slab of class %d", x.id, len(x.t), classSizes[s.class])
			}
			size := int(classSizes[s.class])
			if (o%pageSize)%size != 0 {
				return fmt.Errorf("slab text %d not at an object's start", x.id)
			}
			idx := (o % pageSize) / size
			objs := ri.objs[pg]
			if objs == nil {
				objs = make([]bool, pageSize/size)
				ri.objs[pg] = objs
			}
			if objs[idx] {
				return fmt.Errorf("slab text %d shares object %d of page %d", x.id, idx, pg)
			}
			objs[idx] = true
		}
	}
	if inuse != a.inuse {
		return fmt.Errorf("a.inuse %d, live texts hold %d bytes", a.inuse, inuse)
	}

	if !sort.SliceIsSorted(a.chunks, func(i, j int) bool { return chunkAddr(a.chunks[i]) < chunkAddr(a.chunks[j]) }) {
		return errors.New("chunks not sorted by address")
	}
	var filled int64
	freePages, bigs := 0, 0
	for _, c := range a.chunks {
		ri := info[c]
		if ri.live != c.live {
			return fmt.Errorf("chunk at %d: live %d, %d texts in it", c.off, c.live, ri.live)
		}
		if !open && c.live == 0 {
			return fmt.Errorf("chunk at %d without texts still mapped after Close", c.off)
		}
		if c.big {
			bigs++
			if open {
				filled += int64(len(c.mem))
			}
			continue
		}
		inStack := map[pageRef]bool{}
		for cl := range a.partial {
			for _, r := range a.partial[cl] {
				if r.c == c && r.c.slabs[r.p].class == int8(cl) && r.c.slabs[r.p].partialOf == int8(cl) {
					inStack[r] = true
				}
			}
		}
		for bi := range c.blocks {
			blk := c.blocks[bi]
			want := ri.used[bi]
			for j := 0; j < blockPages; j++ {
				pg := int32(bi*blockPages + j)
				s := c.slabs[pg]
				if s.class < 0 {
					if s.partialOf != -1 || s.inuse != 0 || s.free != 0 || s.bump != 0 {
						return fmt.Errorf("page %d: not a slab but slab state %+v", pg, s)
					}
					if ri.objs[pg] != nil {
						return fmt.Errorf("page %d: slab texts in a page that is not a slab", pg)
					}
					continue
				}
				if want&(1<<j) != 0 {
					return fmt.Errorf("page %d: a slab and in a run", pg)
				}
				want |= 1 << j
				size := int(classSizes[s.class])
				nobj := pageSize / size
				objs := ri.objs[pg]
				n := 0
				for _, l := range objs {
					if l {
						n++
					}
				}
				if n == 0 || int(s.inuse) != n {
					return fmt.Errorf("slab page %d (class %d): inuse %d, %d live objects", pg, size, s.inuse, n)
				}
				if int(s.bump) > nobj {
					return fmt.Errorf("slab page %d: bump %d beyond %d objects", pg, s.bump, nobj)
				}
				for idx, l := range objs {
					if l && idx >= int(s.bump) {
						return fmt.Errorf("slab page %d: live object %d at or beyond bump %d", pg, idx, s.bump)
					}
				}
				if open {
					seen := make([]bool, nobj)
					nfree := 0
					mem := pageRef{c, pg}.mem()
					for f := s.free; f != 0; {
						idx := int(f - 1)
						if idx >= int(s.bump) || seen[idx] || (objs != nil && objs[idx]) {
							return fmt.Errorf("slab page %d: free list entry %d (bump %d, seen %v, live %v)", pg, idx, s.bump, idx < nobj && seen[idx], objs != nil && idx < nobj && objs[idx])
						}
						seen[idx] = true
						nfree++
						f = *(*uint16)(unsafe.Pointer(&mem[idx*size]))
					}
					if nfree+n != int(s.bump) {
						return fmt.Errorf("slab page %d: %d free + %d live, bump %d", pg, nfree, n, s.bump)
					}
					if (s.free != 0 || int(s.bump) < nobj) && (s.partialOf != s.class || !inStack[pageRef{c, pg}]) {
						return fmt.Errorf("slab page %d has room but is not on its partial stack (partialOf %d)", pg, s.partialOf)
					}
				}
			}
			if w, bit := bi/64, uint64(1)<<(bi%64); open && ((c.notFull[w]&bit != 0) != (blk.used != ^uint64(0)) || (c.spare[w]&bit != 0) != (blk.filled&^blk.used != 0)) {
				return fmt.Errorf("block %d: summaries out of date", bi)
			}
			if open && a.freePages > keepFreePages+blockPages {
				return fmt.Errorf("%d free pages", a.freePages)
			}
			if blk.used != want {
				return fmt.Errorf("block %d of chunk at %d: used %064b, texts take %064b", bi, c.off, blk.used, want)
			}
			if open {
				if blk.used&^blk.filled != 0 {
					return fmt.Errorf("block %d of chunk at %d: used pages not filled %064b", bi, c.off, blk.used&^blk.filled)
				}
				filled += int64(bits.OnesCount64(blk.filled)) * pageSize
				freePages += bits.OnesCount64(blk.filled &^ blk.used)
			}
		}
	}
	if bigs != a.bigs {
		return fmt.Errorf("a.bigs %d, %d chunks of their own", a.bigs, bigs)
	}
	if !open {
		return nil
	}
	if filled != a.filled {
		return fmt.Errorf("a.filled %d, filled bits say %d", a.filled, filled)
	}
	if freePages != a.freePages {
		return fmt.Errorf("a.freePages %d, popcount(filled&^used) %d", a.freePages, freePages)
	}
	// The file: its allocated bytes, and page by page. mincore (as
	// SEEK_DATA) reports only pages that are up to date, and a page the
	// helper's fallocate allocated is not until it is touched: every page
	// counted filled is read first. A filled bit on a hole then allocates
	// the page, which st_blocks shows beside a.filled; a page allocated
	// without its filled bit is in st_blocks too.
	var sum byte
	for _, c := range a.chunks {
		for pg := 0; pg < len(c.mem)/pageSize; pg++ {
			if c.big || c.blocks[pg/blockPages].filled&(1<<(pg%blockPages)) != 0 {
				sum += c.mem[pg*pageSize]
			}
		}
	}
	touchSink += sum
	var st unix.Stat_t
	if err := unix.Fstat(a.fd, &st); err != nil {
		return err
	}
	if st.Blocks*512 != a.filled {
		return fmt.Errorf("the file holds %d bytes of pages, a.filled %d", st.Blocks*512, a.filled)
	}
	for _, c := range a.chunks {
		vec := make([]byte, len(c.mem)/pageSize)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&c.mem[0])), uintptr(len(c.mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			return fmt.Errorf("mincore: %v", e)
		}
		for pg, v := range vec {
			in := v&1 != 0
			want := c.big || c.blocks[pg/blockPages].filled&(1<<(pg%blockPages)) != 0
			if in != want {
				return fmt.Errorf("chunk at %d page %d: in the file %v, filled bit %v", c.off, pg, in, want)
			}
		}
	}
	return nil
}

var touchSink byte

// A random sequence of AllocText and FreeText (sizes 1 byte to 300 KiB,
// frees in random order, with and without grow, fills failing now and
// then, the cgroup's limit reached), the arena's invariants checked after
// every operation (checkArena), the texts' data checked all along; some
// runs Close the arena with texts live and free them after.
func TestArenaInvariants(t *testing.T) {
	cases := []struct {
		name       string
		seed       uint64
		limit      int64
		ops        int
		failFills  bool
		closeAtEnd bool
		maxLive    int
	}{
		{"plain", 1, 1 << 30, 5000, false, false, 600},
		{"fill-failures", 2, 1 << 30, 5000, true, false, 600},
		{"at-limit", 3, 40 << 20, 5000, false, true, 1500},
		{"close-midway", 4, 1 << 30, 3000, true, true, 600},
		{"small-live-set", 5, 1 << 30, 5000, false, true, 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() {
				tc.ops /= 5
			}
			b, noHost := hostlessBallast(t, tc.limit)
			if b.text == nil {
				t.Skip("no arena")
			}
			rng := rand.New(rand.NewPCG(tc.seed, 99))
			live := map[uintptr]arenaText{}
			var order []uintptr // live texts, for picking one at random
			var stats struct{ allocs, frees, heap, nomem, noGrow, failed int }
			failUntil := -1
			target, maxFree := 0, 0
			check := func(op int, what string) {
				t.Helper()
				if err := checkArena(b, live); err != nil {
					t.Fatalf("after op %d (%s): %v", op, what, err)
				}
			}
			checkData := func(op int) {
				t.Helper()
				for _, x := range live {
					if !hasPattern(x.t, x.id) {
						t.Fatalf("after op %d: text %d (%d bytes) overwritten", op, x.id, len(x.t))
					}
				}
			}
			for op := 0; op < tc.ops; op++ {
				if tc.failFills && failUntil < 0 && rng.IntN(500) == 0 {
					// The helper is killed and none can replace it: the
					// next fills fail (errNotArena) for a while.
					b.mu.Lock()
					if b.helper != nil {
						p := b.helper.cmd.Process
						p.Kill()
						p.Wait()
					}
					b.mu.Unlock()
					noHost.Store(true)
					failUntil = op + 50 + rng.IntN(100)
				}
				if op == failUntil {
					noHost.Store(false)
					b.mu.Lock()
					b.unbackedUntil = time.Time{}
					b.mu.Unlock()
					failUntil = -1
				}
				// Phases of growth and of shrinking, to a random number
				// of live texts.
				if op%500 == 0 {
					target = rng.IntN(tc.maxLive)
				}
				pAlloc := 25
				if len(order) < target {
					pAlloc = 75
				}
				if len(order) == 0 || rng.IntN(100) < pAlloc {
					n := randTextSize(rng)
					grow := rng.IntN(10) != 0
					x, err := b.AllocText(n, grow)
					what := fmt.Sprintf("AllocText(%d, %v)", n, grow)
					switch {
					case err == nil:
						if len(x) != n || cap(x) != n {
							t.Fatalf("op %d: %s: len %d cap %d", op, what, len(x), cap(x))
						}
						p := textAddr(x)
						if _, dup := live[p]; dup {
							t.Fatalf("op %d: %s returned a live text's address", op, what)
						}
						fillPattern(x, op)
						live[p] = arenaText{op, x}
						order = append(order, p)
						stats.allocs++
					case errors.Is(err, ipcns.ErrNoMemory):
						stats.nomem++
					case errors.Is(err, errNotArena):
						switch {
						case !grow:
							stats.noGrow++
						case failUntil >= 0:
							stats.failed++
						default:
							stats.heap++
						}
					default:
						t.Fatalf("op %d: %s: %v", op, what, err)
					}
					check(op, what)
				} else {
					i := rng.IntN(len(order))
					p := order[i]
					order[i] = order[len(order)-1]
					order = order[:len(order)-1]
					x := live[p]
					if !hasPattern(x.t, x.id) {
						t.Fatalf("op %d: text %d (%d bytes) overwritten before its free", op, x.id, len(x.t))
					}
					delete(live, p)
					if !b.FreeText(x.t) {
						t.Fatalf("op %d: text %d (%d bytes) not recognised as the arena's", op, x.id, len(x.t))
					}
					stats.frees++
					check(op, fmt.Sprintf("FreeText(%d bytes)", len(x.t)))
				}
				b.mu.Lock()
				maxFree = max(maxFree, b.text.freePages)
				b.mu.Unlock()
				if op%64 == 0 {
					checkData(op)
				}
			}
			checkData(tc.ops)
			inuse, held := b.TextUsage()
			b.mu.Lock()
			freePages, chunks := b.text.freePages, len(b.text.chunks)
			b.mu.Unlock()
			t.Logf("%+v; %d live texts, %d bytes, %d bytes of pages, %d free pages (at most %d), %d chunks",
				stats, len(live), inuse, held, freePages, maxFree, chunks)
			if tc.limit < 1<<30 && stats.nomem == 0 && !testing.Short() {
				t.Errorf("the cgroup's limit was never reached")
			}
			if tc.failFills && stats.failed == 0 && !testing.Short() {
				t.Errorf("no fill failed")
			}
			if tc.closeAtEnd {
				b.mu.Lock()
				fd, err := unix.Dup(b.text.fd)
				b.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
				b.Close()
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil {
					t.Fatal(err)
				}
				if st.Blocks != 0 {
					t.Errorf("the text file holds %d bytes after Close", st.Blocks*512)
				}
				check(tc.ops, "Close")
				for _, x := range live {
					for i, c := range x.t {
						if c != 0 {
							t.Fatalf("text %d (%d bytes) holds %#x at %d after Close", x.id, len(x.t), c, i)
						}
					}
				}
				if _, err := b.AllocText(100, true); err == nil {
					t.Fatal("a text from a closed arena")
				}
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				for i, p := range order {
					x := live[p]
					x.t[0] = 1 // no fault, still mapped
					delete(live, p)
					if !b.FreeText(x.t) {
						t.Fatalf("text %d not recognised after Close", x.id)
					}
					check(tc.ops+1+i, "FreeText after Close")
				}
				order = nil
				b.mu.Lock()
				n := len(b.text.chunks)
				b.mu.Unlock()
				if n != 0 {
					t.Fatalf("%d chunks mapped after the last text was freed", n)
				}
				return
			}
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for i, p := range order {
				x := live[p]
				delete(live, p)
				b.FreeText(x.t)
				check(tc.ops+1+i, "FreeText to empty")
			}
			// What arena.go promises: keepFreePages and one block's fill.
			if inuse, held := b.TextUsage(); inuse != 0 || held > (keepFreePages+blockPages)*pageSize {
				t.Errorf("all texts freed: %d bytes of texts, %d bytes of pages (keepFreePages is %d bytes)", inuse, held, keepFreePages*pageSize)
			}
		})
	}
}

// randTextSize returns a text size from 1 byte to 300 KiB: slab sizes,
// runs of pages, chunks of their own, and the edges between them.
func randTextSize(rng *rand.Rand) int {
	edges := [...]int{1, 16, 17, 2047, slabMax, slabMax + 1, pageSize - 1, pageSize, pageSize + 1,
		8192, 33 * pageSize, blockSize - 1, blockSize, blockSize + 1, 300 << 10}
	switch r := rng.IntN(100); {
	case r < 35:
		return 1 + rng.IntN(slabMax)
	case r < 42:
		return edges[rng.IntN(len(edges))]
	case r < 75:
		return slabMax + 1 + rng.IntN(16<<10)
	case r < 93:
		return 1 + rng.IntN(blockSize)
	default:
		return blockSize + 1 + rng.IntN(300<<10-blockSize)
	}
}
