package sysvipcfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
		b, err := os.ReadFile(in + filepath.Join(sv, "sem"))
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
	ents, err := os.ReadDir(in + sv)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "msg sem shm" {
		t.Errorf("entries %v", names)
	}
	if err := os.WriteFile(in+filepath.Join(sv, "sem"), []byte("x"), 0); err == nil {
		t.Errorf("write to sysvipc/sem succeeded")
	}
	b, err := os.ReadFile(in + filepath.Join(sc, "sem"))
	if err != nil || string(b) != "1\t2\t3\t4\n" {
		t.Fatalf("sysctl sem: %q %v", b, err)
	}
	// busybox cat copies with sendfile(2) first, which must see the
	// content too (procfs files have size 0 and support it).
	if bb, err := exec.LookPath("busybox"); err == nil {
		for _, v := range []string{"1\n", "1234567890 1234567890\n", "7\n", "12345\n"} {
			if err := os.WriteFile(in+filepath.Join(sc, "msgmnb"), []byte(v), 0); err != nil {
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
	if err := os.WriteFile(in+filepath.Join(sc, "msgmax"), []byte("100\n"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(in + filepath.Join(sc, "msgmax")); string(b) != "100\n" {
		t.Fatalf("msgmax after write: %q", b)
	}
	err = os.WriteFile(in+filepath.Join(sc, "msgmax"), []byte("bad\n"), 0)
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
			if _, err := os.ReadFile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kernel", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := os.ReadFile("/proc/sysvipc/sem"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
