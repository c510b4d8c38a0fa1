package sysvipcfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type fakeSource struct {
	mu     sync.Mutex
	vals   map[string]string
	reads  int
	lastBy Reader
}

func (s *fakeSource) Sysvipc(name string, r Reader) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	s.lastBy = r
	return []byte(fmt.Sprintf("%s read %d\n", name, s.reads)), nil
}

func (s *fakeSource) ReadSysctl(name string, r Reader) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []byte(s.vals[name]), nil
}

func (s *fakeSource) WriteSysctl(name string, v []byte, r Reader) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.HasPrefix(v, []byte("bad")) {
		return syscall.EINVAL
	}
	s.vals[name] = string(v)
	return nil
}

// The tests read and write the files this process serves, which no real
// reader does (the shim serves, a container's processes read), and they do
// it with plain syscalls (readFile, writeFile, readDirNames), never through
// an *os.File. os.Open registers every file it opens with the runtime's
// epoll (epoll_ctl), and for a FUSE file the kernel answers epoll_ctl with
// a FUSE_POLL request to the server: this same process. The runtime makes
// that epoll_ctl as a plain call, not as a syscall it accounts for, so the
// calling thread keeps its P while it waits for the answer. If a GC
// stop-the-world or forEachP (mark termination) starts in that window it
// waits for that P forever, the go-fuse goroutine that read the POLL
// request never gets a P to answer it, and the process hangs in
// request_wait_answer; the request was read, so the wait is uninterruptible
// and even SIGKILL cannot end the process until the connection is aborted
// (fusectl). Seen once in 20 runs of TestMountInNamespace under stress-ng:
// it hung after "Mount (7 mounts)". go-fuse's own cure, the poll hack run by
// WaitMount, does not run for a /dev/fd/N mount like ours. Calls from the
// syscall and unix packages enter the kernel through the runtime's syscall
// path, which releases the P, so the server keeps running and the answer
// (ENOSYS to POLL) comes.

// readFile is os.ReadFile without the runtime's poller.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// writeFile is os.WriteFile (of an existing file) without the runtime's
// poller.
func writeFile(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		b = b[n:]
	}
	if err := unix.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// readDirNames is the names of os.ReadDir, sorted, without the runtime's
// poller.
func readDirNames(path string) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "getdents", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	sort.Strings(names)
	return names, nil
}

// child starts a process in a private mount namespace and returns its pid.
func child(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespaces, FUSE mounts)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("unshare: ", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for i := 0; i < 200; i++ {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); l != "" && l != self {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("child did not enter its mount namespace")
	return 0
}

func TestMountInNamespace(t *testing.T) {
	base := t.TempDir()
	sv, sc := filepath.Join(base, "sysvipc"), filepath.Join(base, "kernel")
	os.Mkdir(sv, 0o755)
	os.Mkdir(sc, 0o755)
	for _, n := range SysctlFiles {
		os.WriteFile(filepath.Join(sc, n), []byte("host\n"), 0o644)
	}
	pid := child(t)
	src := &fakeSource{vals: map[string]string{"sem": "1\t2\t3\t4\n", "msgmax": "8192\n"}}
	t0 := time.Now()
	f, err := Mount(src, pid, Options{SysvipcDir: sv, SysctlDir: sc})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Mount (7 mounts): %v", time.Since(t0))
	defer f.Close()
	in := fmt.Sprintf("/proc/%d/root", pid)
	// Not visible in our own namespace.
	if b, _ := os.ReadFile(filepath.Join(sc, "sem")); string(b) != "host\n" {
		t.Fatalf("host's file changed: %q", b)
	}
	// Each open renders the file anew (the lookup that sizes it renders
	// it too, so the count goes up by more than one).
	last := 0
	for i := 1; i <= 2; i++ {
		b, err := readFile(in + filepath.Join(sv, "sem"))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if _, err := fmt.Sscanf(string(b), "sem read %d\n", &n); err != nil || n <= last {
			t.Fatalf("read %d: %q after render %d", i, b, last)
		}
		last = n
	}
	src.mu.Lock()
	by := src.lastBy
	src.mu.Unlock()
	if by.Pid != os.Getpid() && by.Pid == 0 {
		t.Errorf("reader pid %d", by.Pid)
	}
	names, err := readDirNames(in + sv)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, " ") != "msg sem shm" {
		t.Errorf("entries %v", names)
	}
	if err := writeFile(in+filepath.Join(sv, "sem"), []byte("x")); err == nil {
		t.Errorf("write to sysvipc/sem succeeded")
	}
	b, err := readFile(in + filepath.Join(sc, "sem"))
	if err != nil || string(b) != "1\t2\t3\t4\n" {
		t.Fatalf("sysctl sem: %q %v", b, err)
	}
	// busybox cat copies with sendfile(2) first, which must see the
	// content too (procfs files have size 0 and support it).
	if bb, err := exec.LookPath("busybox"); err == nil {
		for _, v := range []string{"1\n", "1234567890 1234567890\n", "7\n", "12345\n"} {
			if err := writeFile(in+filepath.Join(sc, "msgmnb"), []byte(v)); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bb, "cat", in+filepath.Join(sc, "msgmnb")).Output()
			if err != nil || string(out) != v {
				t.Errorf("busybox cat msgmnb: %q %v, want %q", out, err, v)
			}
		}
		out, err := exec.Command(bb, "cat", in+filepath.Join(sv, "msg")).Output()
		if err != nil || !strings.HasPrefix(string(out), "msg read ") {
			t.Errorf("busybox cat sysvipc/msg: %q %v", out, err)
		}
	}
	if err := writeFile(in+filepath.Join(sc, "msgmax"), []byte("100\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := readFile(in + filepath.Join(sc, "msgmax")); string(b) != "100\n" {
		t.Fatalf("msgmax after write: %q", b)
	}
	err = writeFile(in+filepath.Join(sc, "msgmax"), []byte("bad\n"))
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad write: %v, want EINVAL", err)
	}
	// The namespace's end stops the server.
	syscall.Kill(pid, syscall.SIGKILL)
	tk := time.Now()
	select {
	case <-f.Done():
		t.Logf("server stopped %v after the kill", time.Since(tk))
	case <-time.After(5 * time.Second):
		t.Fatal("server still running 5s after the namespace's last process died")
	}
}

// BenchmarkOpenRead is the cost of one open+read+close of a served file,
// against the kernel's /proc/sysvipc/sem.
func BenchmarkOpenRead(b *testing.B) {
	base := b.TempDir()
	sv := filepath.Join(base, "sysvipc")
	os.Mkdir(sv, 0o755)
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sleep", "600")
	if err := cmd.Start(); err != nil {
		b.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(50 * time.Millisecond)
	f, err := Mount(&fakeSource{vals: map[string]string{}}, cmd.Process.Pid, Options{SysvipcDir: sv, SysctlDir: "-"})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	p := fmt.Sprintf("/proc/%d/root%s/sem", cmd.Process.Pid, sv)
	b.Run("fuse", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := readFile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kernel", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := readFile("/proc/sysvipc/sem"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
