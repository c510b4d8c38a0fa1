package tasktrace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func testKey() cacheKey {
	return cacheKey{Version: cacheVersion, BootID: "boot-1", Release: "6.18 #1", BTFSize: 5481434, Build: "go:abc", Questions: "q"}
}

func testFacts() *kernelFacts {
	return &kernelFacts{
		Layout: kernelLayout{TaskPid: 1264, TaskTgid: 1268, TaskNsproxy: 1840, NsproxyIPC: 16, IPCInum: 1144,
			KaFlags: 8, TaskSignal: 1848, SignalLive: 4, ExitHasGroupDead: true},
		Attach: map[string]uint32{tpDeliver: 9868, tpGenerate: 9864, tpExit: 10304, tpExec: 10318},
	}
}

func cacheDir(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCacheHit(t *testing.T) {
	dir, k, f := cacheDir(t), testKey(), testFacts()
	if err := writeCache(dir, k, f); err != nil {
		t.Fatal(err)
	}
	got, err := readCache(dir, k)
	if err != nil {
		t.Fatal(err)
	}
	if got.Layout != f.Layout || len(got.Attach) != len(f.Attach) {
		t.Fatalf("read %+v, wrote %+v", got, f)
	}
	for tp, id := range f.Attach {
		if got.Attach[tp] != id {
			t.Errorf("attach %s: %d, wrote %d", tp, got.Attach[tp], id)
		}
	}
	st, err := os.Stat(cachePath(dir, k))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", st.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the cache directory, want 1 (no temporary left)", len(ents))
	}
}

func TestCacheMiss(t *testing.T) {
	dir := cacheDir(t)
	if _, err := readCache(dir, testKey()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty directory: %v, want not exist", err)
	}
	if _, err := readCache(filepath.Join(dir, "none"), testKey()); err == nil {
		t.Fatal("missing directory: no error")
	}
}

// TestCacheOtherKey: facts written for another boot (or kernel, or build)
// are not read, whether under their own name or copied under this key's.
func TestCacheOtherKey(t *testing.T) {
	for name, change := range map[string]func(*cacheKey){
		"boot id": func(k *cacheKey) { k.BootID = "boot-2" },
		"release": func(k *cacheKey) { k.Release = "6.19 #1" },
		"btf":     func(k *cacheKey) { k.BTFSize++ },
		"build":   func(k *cacheKey) { k.Build = "go:def" },
		"program": func(k *cacheKey) { k.Questions = "other" },
		"version": func(k *cacheKey) { k.Version++ },
	} {
		t.Run(name, func(t *testing.T) {
			dir, k := cacheDir(t), testKey()
			old := k
			change(&old)
			if err := writeCache(dir, old, testFacts()); err != nil {
				t.Fatal(err)
			}
			if _, err := readCache(dir, k); err == nil {
				t.Fatal("read facts written for another key")
			}
			if err := os.Rename(cachePath(dir, old), cachePath(dir, k)); err != nil {
				t.Fatal(err)
			}
			if _, err := readCache(dir, k); err == nil {
				t.Fatal("read facts written for another key, renamed to this key's file")
			}
		})
	}
}

func TestCacheCorrupt(t *testing.T) {
	for name, mangle := range map[string]func([]byte) []byte{
		"empty":     func([]byte) []byte { return nil },
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"not json":  func(b []byte) []byte { return []byte("\x00\x01garbage") },
		// A digit of an offset changed: valid JSON, wrong checksum.
		"offset": func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"TaskNsproxy":1840`, `"TaskNsproxy":1848`, 1))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, k := cacheDir(t), testKey()
			if err := writeCache(dir, k, testFacts()); err != nil {
				t.Fatal(err)
			}
			p := cachePath(dir, k)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, mangle(b), 0o600); err != nil {
				t.Fatal(err)
			}
			if f, err := readCache(dir, k); err == nil {
				t.Fatalf("read %+v from a corrupt file", f)
			}
		})
	}
}

// TestCacheNonsense: a file that is intact but says what no kernel can
// (written by a broken build) is refused.
func TestCacheNonsense(t *testing.T) {
	for name, change := range map[string]func(*kernelFacts){
		"no attach id":     func(f *kernelFacts) { f.Attach[tpExit] = 0 },
		"missing attach":   func(f *kernelFacts) { delete(f.Attach, tpExec) },
		"huge offset":      func(f *kernelFacts) { f.Layout.TaskNsproxy = 1 << 20 },
		"extra tracepoint": func(f *kernelFacts) { f.Attach["sched_switch"] = 5 },
	} {
		t.Run(name, func(t *testing.T) {
			dir, k, f := cacheDir(t), testKey(), testFacts()
			change(f)
			if err := writeCache(dir, k, f); err != nil {
				t.Fatal(err)
			}
			if _, err := readCache(dir, k); err == nil {
				t.Fatal("read nonsense")
			}
		})
	}
}

// TestCachePermissions: a file or directory that others could have
// written is not read.
func TestCachePermissions(t *testing.T) {
	dir, k := cacheDir(t), testKey()
	if err := writeCache(dir, k, testFacts()); err != nil {
		t.Fatal(err)
	}
	p := cachePath(dir, k)
	os.Chmod(p, 0o644)
	if _, err := readCache(dir, k); !errors.Is(err, errCacheUnsafe) {
		t.Errorf("file mode 0644: %v, want %v", err, errCacheUnsafe)
	}
	os.Chmod(p, 0o600)
	os.Chmod(dir, 0o777)
	if _, err := readCache(dir, k); !errors.Is(err, errCacheUnsafe) {
		t.Errorf("directory mode 0777: %v, want %v", err, errCacheUnsafe)
	}
	os.Chmod(dir, 0o700)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := readCache(link, k); err == nil {
		t.Error("read through a symbolic link to the directory")
	}
	other := filepath.Join(t.TempDir(), "f")
	os.Rename(p, other)
	os.Symlink(other, p)
	if _, err := readCache(dir, k); err == nil {
		t.Error("read a symbolic link")
	}
}

// TestCacheConcurrentWriters: shims starting together each write the
// file; readers meanwhile see a complete file or none, never a part.
func TestCacheConcurrentWriters(t *testing.T) {
	dir, k, f := cacheDir(t), testKey(), testFacts()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad error
	var mu sync.Mutex
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := readCache(dir, k); err != nil && !errors.Is(err, os.ErrNotExist) {
					mu.Lock()
					bad = err
					mu.Unlock()
				}
			}
		}()
	}
	var ww sync.WaitGroup
	for w := 0; w < 8; w++ {
		ww.Add(1)
		go func() {
			defer ww.Done()
			for i := 0; i < 50; i++ {
				if err := writeCache(dir, k, f); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	ww.Wait()
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Errorf("a reader saw a bad file during concurrent writes: %v", bad)
	}
	if _, err := readCache(dir, k); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the cache directory, want 1", len(ents))
	}
}

func TestGoBuildID(t *testing.T) {
	id, err := buildID()
	if err != nil {
		t.Fatal(err)
	}
	if len(id) < 10 || id[:3] != "go:" {
		t.Errorf("build id of the test binary: %q, want the Go build ID", id)
	}
	if goBuildID([]byte("nothing here")) != "" {
		t.Error("found a build ID in nothing")
	}
}

// TestProgLoadAttrLayout: the BPF_PROG_LOAD fields sit where
// include/uapi/linux/bpf.h has them.
func TestProgLoadAttrLayout(t *testing.T) {
	var a progLoadAttr
	for name, c := range map[string][2]uintptr{
		"insns":                {unsafe.Offsetof(a.insns), 8},
		"license":              {unsafe.Offsetof(a.license), 16},
		"log_buf":              {unsafe.Offsetof(a.logBuf), 32},
		"prog_name":            {unsafe.Offsetof(a.progName), 48},
		"expected_attach_type": {unsafe.Offsetof(a.expectedAttachType), 68},
		"attach_btf_id":        {unsafe.Offsetof(a.attachBTFID), 108},
		"attach_btf_obj_fd":    {unsafe.Offsetof(a.attachBTFObjFd), 112},
		"size":                 {unsafe.Sizeof(a), 120},
	} {
		if c[0] != c[1] {
			t.Errorf("%s at %d, want %d", name, c[0], c[1])
		}
	}
}

func needBPF(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("no kernel BTF")
	}
}

// TestNewCached: the first Tracer parses and writes the cache, the next
// reads it, and both see the same facts as a parse.
func TestNewCached(t *testing.T) {
	needBPF(t)
	dir := cacheDir(t)
	cpu0 := cpuTime()
	t1, err := NewWithOptions(Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cpu1 := cpuTime()
	t1.Close()
	if t1.LoadInfo().Cached || t1.LoadInfo().CacheErr == nil {
		t.Errorf("first Tracer: %+v, want parsed after a miss", t1.LoadInfo())
	}
	cpu2 := cpuTime()
	t2, err := NewWithOptions(Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cpu3 := cpuTime()
	t2.Close()
	if !t2.LoadInfo().Cached {
		t.Errorf("second Tracer: %+v, want cached", t2.LoadInfo())
	}
	t.Logf("parse: %v wall, %v CPU; cached: %v wall, %v CPU", t1.LoadInfo().Duration, cpu1-cpu0, t2.LoadInfo().Duration, cpu3-cpu2)
	k, err := currentKey()
	if err != nil {
		t.Fatal(err)
	}
	cached, err := readCache(dir, k)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseFacts()
	if err != nil {
		t.Fatal(err)
	}
	if cached.Layout != parsed.Layout {
		t.Errorf("cached layout %+v, parsed %+v", cached.Layout, parsed.Layout)
	}
}

// TestWrongAttachID: facts whose attach ids name other tracepoints (here
// exit's and exec's swapped: both programs pass the verifier on either)
// are caught when the kernel reports where it attached; New then forgets
// the file and parses.
func TestWrongAttachID(t *testing.T) {
	needBPF(t)
	f, err := parseFacts()
	if err != nil {
		t.Fatal(err)
	}
	f.Attach[tpExit], f.Attach[tpExec] = f.Attach[tpExec], f.Attach[tpExit]
	if tr, err := newTracer(f); !errors.Is(err, errWrongTracepoint) {
		if tr != nil {
			tr.Close()
		}
		t.Fatalf("swapped attach ids: %v, want %v", err, errWrongTracepoint)
	}
	dir := cacheDir(t)
	k, err := currentKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeCache(dir, k, f); err != nil {
		t.Fatal(err)
	}
	tr, err := NewWithOptions(Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if tr.LoadInfo().Cached {
		t.Fatal("used the wrong cached facts")
	}
	good, err := readCache(dir, k)
	if err != nil {
		t.Fatalf("the cache was not rewritten: %v", err)
	}
	if good.Attach[tpExit] == f.Attach[tpExit] {
		t.Error("the cache still holds the wrong attach ids")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestWrongOffsetRefused: an nsproxy offset that does not land on a
// pointer field leaves the verifier a scalar, which the programs then
// dereference: the kernel refuses them (docs/bench-shim.md relies on this
// for part of the cache's safety).
func TestWrongOffsetRefused(t *testing.T) {
	needBPF(t)
	f, err := parseFacts()
	if err != nil {
		t.Fatal(err)
	}
	f.Layout.TaskNsproxy += 4
	if tr, err := newTracer(f); err == nil {
		tr.Close()
		t.Fatal("programs with task_struct.nsproxy 4 bytes off were loaded")
	} else {
		t.Logf("refused: %v", err)
	}
}

// TestCachePrune: writing a file leaves at most maxCacheFiles cache files
// (the newest, and always the one written) and removes old temporaries.
func TestCachePrune(t *testing.T) {
	dir := cacheDir(t)
	old := time.Now().Add(-time.Hour)
	for i := 0; i < maxCacheFiles+3; i++ {
		k := testKey()
		k.Build = fmt.Sprintf("go:%d", i)
		if err := writeCache(dir, k, testFacts()); err != nil {
			t.Fatal(err)
		}
		// Older builds' files are older.
		mt := old.Add(time.Duration(i) * time.Minute)
		os.Chtimes(cachePath(dir, k), mt, mt)
	}
	stale := filepath.Join(dir, ".tasktrace-1.tmp")
	fresh := filepath.Join(dir, ".tasktrace-2.tmp")
	os.WriteFile(stale, nil, 0o600)
	os.Chtimes(stale, old, old)
	os.WriteFile(fresh, nil, 0o600)
	k := testKey()
	k.Build = "go:last"
	if err := writeCache(dir, k, testFacts()); err != nil {
		t.Fatal(err)
	}
	var json []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			json = append(json, e.Name())
		}
	}
	if len(json) != maxCacheFiles {
		t.Errorf("%d cache files after pruning, want %d", len(json), maxCacheFiles)
	}
	if _, err := readCache(dir, k); err != nil {
		t.Errorf("the file just written: %v", err)
	}
	newest := testKey()
	newest.Build = fmt.Sprintf("go:%d", maxCacheFiles+2)
	if _, err := readCache(dir, newest); err != nil {
		t.Errorf("the newest other file: %v", err)
	}
	oldest := testKey()
	oldest.Build = "go:0"
	if _, err := readCache(dir, oldest); err == nil {
		t.Error("the oldest file was kept")
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a temporary file an hour old was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a fresh temporary file (a writer at work) was removed")
	}
}
