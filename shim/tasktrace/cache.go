package tasktrace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// kernelFacts is all that the Tracer needs from the kernel's BTF: the
// structure offsets its programs read and, for each tracepoint, the BTF
// type id of its btf_trace_<name> typedef in vmlinux, which BPF_PROG_LOAD
// takes as the program's attach target.
//
// Learning them means parsing the kernel's BTF (~5 MB, 130k types): ~30-50
// ms of CPU, which on a 2-vCPU machine competes with runc and containerd
// while a container starts. They cannot change while the kernel runs, so
// the first Tracer after boot writes them to a file (cache.go) and the
// next ones read that instead.
type kernelFacts struct {
	Layout kernelLayout
	Attach map[string]uint32 // tracepoint name → btf_trace_<name> type id
}

// parseFacts learns the facts from the kernel's BTF.
func parseFacts() (*kernelFacts, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF: %w", err)
	}
	l, err := loadLayout(spec)
	if err != nil {
		return nil, err
	}
	f := &kernelFacts{Layout: *l, Attach: map[string]uint32{}}
	for _, tp := range tracepoints {
		var td *btf.Typedef
		if err := spec.TypeByName("btf_trace_"+tp, &td); err != nil {
			return nil, fmt.Errorf("BTF raw tracepoint %s: %w", tp, err)
		}
		id, err := spec.TypeID(td)
		if err != nil {
			return nil, fmt.Errorf("BTF raw tracepoint %s: %w", tp, err)
		}
		f.Attach[tp] = uint32(id)
	}
	return f, nil
}

// check rejects facts that cannot be right whatever the kernel: a cache
// file that decodes but says nonsense is not used.
func (f *kernelFacts) check() error {
	l := &f.Layout
	for _, fl := range layoutFields {
		// The programs load with 16-bit signed offsets.
		if v := *fl.dst(l); v > 0x7fff {
			return fmt.Errorf("offset of %s.%s is %d", fl.typ, strings.Join(fl.path, "."), v)
		}
	}
	for _, tp := range tracepoints {
		if f.Attach[tp] == 0 {
			return fmt.Errorf("no BTF type id for tracepoint %s", tp)
		}
	}
	if len(f.Attach) != len(tracepoints) {
		return fmt.Errorf("%d attach targets, want %d", len(f.Attach), len(tracepoints))
	}
	return nil
}

// cacheVersion changes when the meaning of a cache file changes in a way
// the key does not capture (the key already holds the shim's build).
const cacheVersion = 1

// cacheKey says which kernel and which build a file's facts are for. A
// file is used only when its key equals the running one in every field.
type cacheKey struct {
	Version int
	// BootID (/proc/sys/kernel/random/boot_id) is new at every boot: the
	// BTF of the running kernel cannot change until then (vmlinux's is
	// built in, read-only).
	BootID string
	// Release and BTFSize (of /sys/kernel/btf/vmlinux) are redundant
	// with BootID, and cheap.
	Release string
	BTFSize int64
	// Build is the executable's Go build ID (a hash of everything it was
	// built from), or when it has none its identity on disk.
	Build string
	// Questions hashes what loadLayout asks and the tracepoints: a build
	// that asks something else never takes another's answers.
	Questions string
}

func currentKey() (cacheKey, error) {
	k := cacheKey{Version: cacheVersion}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return k, err
	}
	k.BootID = strings.TrimSpace(string(b))
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return k, err
	}
	k.Release = unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Version[:])
	var st unix.Stat_t
	if err := unix.Stat("/sys/kernel/btf/vmlinux", &st); err != nil {
		return k, err
	}
	k.BTFSize = st.Size
	if k.Build, err = buildID(); err != nil {
		return k, err
	}
	h := sha256.New()
	for _, f := range layoutFields {
		fmt.Fprintf(h, "%s.%s\n", f.typ, strings.Join(f.path, "."))
	}
	fmt.Fprintf(h, "pt_regs %d %d %d %d %d %d %d %d %d %d %d %d\n", regR10, regR9, regR8, regAx, regDx, regSi, regDi, regOrigAx, regIP, regBx, regCx, regBp)
	fmt.Fprintf(h, "args %s\n", tpExit)
	for _, tp := range tracepoints {
		fmt.Fprintf(h, "btf_trace_%s\n", tp)
	}
	k.Questions = hex.EncodeToString(h.Sum(nil))
	return k, nil
}

// buildID returns the Go build ID of the running executable, read from
// its ELF note (.note.go.buildid, which the Go linker places in the first
// page), or else the executable's device, inode, size and change time.
func buildID() (string, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	n, _ := io.ReadFull(f, buf)
	if id := goBuildID(buf[:n]); id != "" {
		return "go:" + id, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("file:%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Ctim.Sec, st.Ctim.Nsec), nil
}

// goBuildID finds the Go build ID note in the start of an ELF file: namesz
// 4, descsz, type 4 (ELF_NOTE_GOBUILDID_TAG), name "Go\0\0", desc.
func goBuildID(b []byte) string {
	tag := []byte("\x04\x00\x00\x00Go\x00\x00")
	for off := 0; ; {
		i := bytes.Index(b[off:], tag)
		if i < 0 {
			return ""
		}
		i += off
		off = i + 1
		if i < 8 || b[i-8] != 4 || b[i-7] != 0 || b[i-6] != 0 || b[i-5] != 0 {
			continue
		}
		size := int(b[i-4]) | int(b[i-3])<<8 | int(b[i-2])<<16 | int(b[i-1])<<24
		start := i + len(tag)
		if size <= 0 || size > 1024 || start+size > len(b) {
			continue
		}
		return string(b[start : start+size])
	}
}

// cacheFile is a cache file's content: the key, the facts and a checksum
// of both (JSON of the struct with Sum empty).
type cacheFile struct {
	Key   cacheKey
	Facts kernelFacts
	Sum   string
}

func (c *cacheFile) sum() string {
	d := *c
	d.Sum = ""
	b, _ := json.Marshal(&d)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// cachePath is the file for key k in dir: one per kernel boot and build,
// so that shims of different builds (and test binaries) do not take turns
// overwriting one file.
func cachePath(dir string, k cacheKey) string {
	b, _ := json.Marshal(k)
	h := sha256.Sum256(b)
	return filepath.Join(dir, "tasktrace-"+hex.EncodeToString(h[:12])+".json")
}

// errCacheUnsafe: the cache directory or file could be written by someone
// other than this user; it is not used.
var errCacheUnsafe = errors.New("not owned by this user or writable by others")

// checkOwned accepts a file or directory owned by the effective user and
// not writable by group or others (a file: not readable either).
func checkOwned(st *unix.Stat_t, file bool) error {
	mask := uint32(0o022)
	if file {
		mask = 0o077
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&mask != 0 {
		return errCacheUnsafe
	}
	return nil
}

// checkKind checks that path, of status st, is a directory (S_IFDIR) or
// a regular file (S_IFREG) owned as checkOwned requires of it.
func checkKind(st *unix.Stat_t, kind uint32, path string) error {
	if st.Mode&unix.S_IFMT != kind {
		if kind == unix.S_IFDIR {
			return fmt.Errorf("%s: not a directory", path)
		}
		return fmt.Errorf("%s: not a regular file", path)
	}
	if err := checkOwned(st, kind == unix.S_IFREG); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readCache returns the facts cached in dir for key k.
func readCache(dir string, k cacheKey) (*kernelFacts, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, err
	}
	if err := checkKind(&st, unix.S_IFDIR, dir); err != nil {
		return nil, err
	}
	p := cachePath(dir, k)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if err := checkKind(&st, unix.S_IFREG, p); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, err
	}
	var c cacheFile
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if c.Sum == "" || c.Sum != c.sum() {
		return nil, fmt.Errorf("%s: checksum mismatch", p)
	}
	if c.Key != k {
		return nil, fmt.Errorf("%s: for another kernel or build", p)
	}
	if err := c.Facts.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &c.Facts, nil
}

// writeCache stores f for key k in dir, atomically: a complete file
// under a temporary name, renamed into place. Concurrent writers each
// rename their own complete file; the facts they write are the same.
func writeCache(dir string, k cacheKey, f *kernelFacts) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	c := cacheFile{Key: k, Facts: *f}
	c.Sum = c.sum()
	b, err := json.Marshal(&c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tasktrace-*.tmp") // mode 0600
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), cachePath(dir, k))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	pruneCache(dir, cachePath(dir, k))
	return nil
}

// maxCacheFiles bounds the cache files kept in a directory: one per build
// of the shim (or of a test binary) that ran since boot. A host runs one
// or two builds; a developer's machine many.
const maxCacheFiles = 8

// pruneCache removes all but the maxCacheFiles newest cache files in dir
// (never keep, the one just written), and temporary files that a writer
// that died left more than a minute ago. A build whose file was removed
// parses the BTF once more.
func pruneCache(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		mod  time.Time
	}
	var files []file
	for _, e := range ents {
		name := e.Name()
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		p := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(name, ".tasktrace-") && strings.HasSuffix(name, ".tmp"):
			if time.Since(info.ModTime()) > time.Minute {
				os.Remove(p)
			}
		case strings.HasPrefix(name, "tasktrace-") && strings.HasSuffix(name, ".json") && p != keep:
			files = append(files, file{p, info.ModTime()})
		}
	}
	if len(files) < maxCacheFiles {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.After(files[j].mod) })
	for _, f := range files[maxCacheFiles-1:] {
		os.Remove(f.path)
	}
}

// removeCache removes the file for key k in dir (facts that the kernel
// contradicted).
func removeCache(dir string, k cacheKey) {
	os.Remove(cachePath(dir, k))
}
