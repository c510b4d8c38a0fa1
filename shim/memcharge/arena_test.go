package memcharge

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
)

// fillPattern writes a pattern of id into t, checked by hasPattern.
func fillPattern(t []byte, id int) {
	for i := range t {
		t[i] = byte(id*31 + i)
	}
}

func hasPattern(t []byte, id int) bool {
	for i := range t {
		if t[i] != byte(id*31+i) {
			return false
		}
	}
	return true
}

// rssAnon returns this process's anonymous resident memory.
func rssAnon(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`RssAnon:\s+(\d+) kB`).FindSubmatch(b)
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// Texts live in the pod's pages: the cgroup's usage grows by what they
// hold, the shim's anonymous memory does not, and freeing them gives the
// pages back but for keepFreePages.
func TestTextsInPodPages(t *testing.T) {
	dir, usage := testCgroup(t, 256<<20)
	b := newBallast(t, dir)
	if err := b.Charge(1); err != nil { // start the helper: its pages are the cgroup's too
		t.Fatal(err)
	}
	b.Uncharge(1)
	before, anon := readInt(t, usage), rssAnon(t)
	const n, size = 4096, 8192 // 32 MiB of 8 KiB texts
	texts := make([][]byte, n)
	for i := range texts {
		var err error
		if texts[i], err = b.AllocText(size, true); err != nil {
			t.Fatalf("text %d: %v", i, err)
		}
		fillPattern(texts[i], i)
	}
	grew := readInt(t, usage) - before
	if grew < n*size-4*Granule || grew > n*size+4*Granule {
		t.Fatalf("cgroup usage grew by %d bytes for %d bytes of text", grew, n*size)
	}
	if a := rssAnon(t) - anon; a > n*size/4 {
		t.Fatalf("the shim's anonymous memory grew by %d bytes for %d bytes of text", a, n*size)
	}
	if charged, held := b.Usage(); charged != n*size || held < n*size {
		t.Fatalf("usage: charged %d, held %d", charged, held)
	}
	for i, x := range texts {
		if !hasPattern(x, i) {
			t.Fatalf("text %d overwritten", i)
		}
		if !b.FreeText(x) {
			t.Fatalf("text %d not the arena's", i)
		}
	}
	if charged, _ := b.Usage(); charged != 0 || b.text.filled > keepFreePages*pageSize {
		t.Fatalf("after freeing all: charged %d, text pages %d", charged, b.text.filled)
	}
	if after := readInt(t, usage) - before; after > keepFreePages*pageSize+4*blockSize {
		t.Fatalf("cgroup usage still %d bytes above its start", after)
	}
}

// Texts of every size class and of chunks of their own never overlap,
// through frees and reuse.
func TestTextsDoNotOverlap(t *testing.T) {
	dir, _ := testCgroup(t, 512<<20)
	b := newBallast(t, dir)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[int][]byte{}
	total := int64(0)
	for id := 0; id < 6000; id++ {
		if len(live) > 0 && rng.IntN(3) == 0 {
			for k, x := range live { // a random one
				if !hasPattern(x, k) {
					t.Fatalf("text %d (%d bytes) overwritten", k, len(x))
				}
				b.FreeText(x)
				total -= int64(len(x))
				delete(live, k)
				break
			}
		}
		n := 1 + rng.IntN(5000)
		switch rng.IntN(20) {
		case 0:
			n = blockSize + rng.IntN(3*blockSize) // a chunk of its own
		case 1:
			n = 4096 + rng.IntN(blockSize-4096)
		}
		x, err := b.AllocText(n, true)
		if err != nil {
			t.Fatalf("text %d of %d bytes: %v", id, n, err)
		}
		if len(x) != n || cap(x) != n {
			t.Fatalf("text of %d bytes: len %d cap %d", n, len(x), cap(x))
		}
		fillPattern(x, id)
		live[id] = x
		total += int64(n)
	}
	for k, x := range live {
		if !hasPattern(x, k) {
			t.Fatalf("text %d (%d bytes) overwritten", k, len(x))
		}
	}
	if charged, _ := b.Usage(); charged != total {
		t.Fatalf("charged %d, want %d", charged, total)
	}
	for _, x := range live {
		b.FreeText(x)
	}
	if charged, _ := b.Usage(); charged != 0 || b.text.filled > keepFreePages*pageSize {
		t.Fatalf("after freeing all: charged %d, text pages %d", charged, b.text.filled)
	}
	if b.FreeText(make([]byte, 10)) {
		t.Fatal("a heap slice taken for a text")
	}
}

// At the cgroup's limit a text is refused with ErrNoMemory, and there is
// room again once texts are freed.
func TestTextRefusedAtLimit(t *testing.T) {
	const limit = 32 << 20
	dir, _ := testCgroup(t, limit)
	b := newBallast(t, dir)
	var texts [][]byte
	var err error
	for len(texts) < 2*limit/8192 {
		var x []byte
		if x, err = b.AllocText(8192, true); err != nil {
			break
		}
		texts = append(texts, x)
	}
	if !errors.Is(err, ipcns.ErrNoMemory) {
		t.Fatalf("%d texts of 8 KiB in a %d-byte cgroup; last error %v", len(texts), limit, err)
	}
	if len(texts) < limit/2/8192 {
		t.Fatalf("refused after only %d texts", len(texts))
	}
	for _, x := range texts[:len(texts)/2] {
		b.FreeText(x)
	}
	if _, err := b.AllocText(8192, true); err != nil {
		t.Fatalf("a text after freeing half: %v", err)
	}
}

// A text used after Close reads zeros rather than faulting, and its
// mapping goes with it.
func TestTextAfterClose(t *testing.T) {
	dir, _ := testCgroup(t, 64<<20)
	b := newBallast(t, dir)
	small, err := b.AllocText(100, true)
	if err != nil {
		t.Fatal(err)
	}
	big, err := b.AllocText(blockSize+1, true)
	if err != nil {
		t.Fatal(err)
	}
	fillPattern(small, 1)
	fillPattern(big, 2)
	b.Close()
	if !bytes.Equal(small, make([]byte, 100)) || big[blockSize] != 0 {
		t.Fatal("texts still hold data after Close")
	}
	small[0] = 1 // no fault
	if _, err := b.AllocText(100, true); err == nil {
		t.Fatal("a text from a closed arena")
	}
	if !b.FreeText(small) || !b.FreeText(big) {
		t.Fatal("texts of the closed arena not recognised")
	}
	if n := len(b.text.chunks); n != 0 {
		t.Fatalf("%d chunks still mapped", n)
	}
}

// BenchmarkText is a text's allocation and release, as a msgsnd and the
// msgrcv that takes its message make them, against the heap's make (the
// garbage collector's share not counted).
func BenchmarkText(b *testing.B) {
	for _, size := range []int{8, 8192} {
		b.Run("arena/"+strconv.Itoa(size), func(b *testing.B) { benchArena(b, size, 0) })
		b.Run("arena-holding-96MiB/"+strconv.Itoa(size), func(b *testing.B) { benchArena(b, size, 96<<20) })
		b.Run("heap/"+strconv.Itoa(size), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				x := make([]byte, size)
				x[0] = 1
				sink = x
			}
		})
	}
}

// benchArena times a text of size bytes allocated and freed in an arena
// that holds held bytes of 8 KiB texts already.
func benchArena(b *testing.B, size, held int) {
	dir, _ := testCgroup(b, 256<<20)
	bal, err := New("bench", func() ([]Place, error) {
		return []Place{{Container: "ctr", Procs: dir + "/cgroup.procs"}}, nil
	}, b.Logf)
	if err != nil {
		b.Fatal(err)
	}
	defer bal.Close()
	for n := 0; n < held; n += 8192 {
		if _, err := bal.AllocText(8192, true); err != nil {
			b.Fatal(err)
		}
	}
	x, _ := bal.AllocText(size, true) // the block it will use, filled
	bal.FreeText(x)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x, err := bal.AllocText(size, true)
		if err != nil {
			b.Fatal(err)
		}
		x[0] = 1
		bal.FreeText(x)
	}
}

var sink []byte

// The pod is charged for the pages its texts take, not a block per size:
// texts of every small class and of 1 to 16 pages take their own pages,
// rounded up to at most one block's fill, and all freed leave at most
// keepFreePages allocated.
func TestTextsShareBlocks(t *testing.T) {
	dir, _ := testCgroup(t, 256<<20)
	b := newBallast(t, dir)
	var texts [][]byte
	pages := 0
	for _, s := range classSizes {
		texts = append(texts, nil)
		pages++ // a slab page each
		var err error
		if texts[len(texts)-1], err = b.AllocText(int(s), true); err != nil {
			t.Fatal(err)
		}
	}
	for k := 1; k <= 16; k++ {
		x, err := b.AllocText(k*pageSize-100, true)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, x)
		pages += k
	}
	if _, filled := b.TextUsage(); filled > int64(pages)*pageSize+blockSize {
		t.Fatalf("%d pages of texts hold %d bytes of pages (%d blocks)", pages, filled, filled/blockSize)
	}
	for i, x := range texts {
		fillPattern(x, i)
	}
	for i, x := range texts {
		if !hasPattern(x, i) {
			t.Fatalf("text %d overwritten", i)
		}
		b.FreeText(x)
	}
	if inuse, filled := b.TextUsage(); inuse != 0 || filled > keepFreePages*pageSize {
		t.Fatalf("after freeing all: texts %d, pages %d", inuse, filled)
	}
}

// Without grow a text comes only from pages already allocated: nothing
// new is charged to the pod.
func TestTextWithoutGrow(t *testing.T) {
	dir, _ := testCgroup(t, 64<<20)
	b := newBallast(t, dir)
	if _, err := b.AllocText(100, false); err == nil {
		t.Fatal("a text without pages and without grow")
	}
	if _, held := b.TextUsage(); held != 0 {
		t.Fatalf("%d bytes of pages allocated without grow", held)
	}
	x, err := b.AllocText(100, true)
	if err != nil {
		t.Fatal(err)
	}
	_, held := b.TextUsage()
	y, err := b.AllocText(8192, false) // room in the block already filled
	if err != nil {
		t.Fatalf("a text from pages already allocated: %v", err)
	}
	if _, h := b.TextUsage(); h != held {
		t.Fatalf("pages grew from %d to %d without grow", held, h)
	}
	b.FreeText(x)
	b.FreeText(y)
}

// A fill that fails for good (the helper killed, none to replace it)
// gives back only the block's former holes: the texts that share the
// block keep their data, and the text goes to the heap.
func TestTextFillFailureKeepsLiveTexts(t *testing.T) {
	b, noHost := hostlessBallast(t, 256<<20)
	var texts [][]byte
	for i := 0; i < 4*blockPages; i++ { // four blocks of one-page texts
		x, err := b.AllocText(pageSize, true)
		if err != nil {
			t.Fatal(err)
		}
		fillPattern(x, i)
		texts = append(texts, x)
	}
	live := map[int][]byte{}
	for i, x := range texts { // free three in four: holes in every block
		if i%4 == 0 {
			live[i] = x
		} else {
			b.FreeText(x)
		}
	}
	b.mu.Lock()
	p := b.helper.cmd.Process
	b.mu.Unlock()
	p.Kill()
	p.Wait()
	noHost.Store(true)
	heap := 0
	for i := 0; i < 2*blockPages; i++ { // beyond the free pages kept: a fill
		x, err := b.AllocText(pageSize, true)
		if errors.Is(err, errNotArena) {
			x, heap = make([]byte, pageSize), heap+1 // Resources' fallback
		} else if err != nil {
			t.Fatal(err)
		}
		live[1000+i] = x
		fillPattern(x, 1000+i)
	}
	for i, x := range live {
		if !hasPattern(x, i) {
			t.Fatalf("text %d lost its data when a fill failed", i)
		}
	}
	if heap == 0 || b.Backed() {
		t.Fatalf("%d texts went to the heap, backed %v: no fill failed", heap, b.Backed())
	}
	for _, x := range live {
		b.FreeText(x) // heap texts are not the arena's: false, and fine
	}
}

// hostlessBallast returns a ballast in a cgroup limited to limit bytes
// whose helper cannot be started (nor replaced) once noHost is set.
func hostlessBallast(t *testing.T, limit int64) (b *Ballast, noHost *atomic.Bool) {
	t.Helper()
	dir, _ := testCgroup(t, limit)
	noHost = new(atomic.Bool)
	b, err := New(t.Name(), func() ([]Place, error) {
		if noHost.Load() {
			return nil, errors.New("no container to host a helper")
		}
		return []Place{{Container: "ctr", Procs: filepath.Join(dir, "cgroup.procs")}}, nil
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, noHost
}
