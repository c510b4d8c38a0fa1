package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shimPid returns the pid of the running containerd-shim-ipc-v2 that
// serves container id (started with "-id <id>").
func shimPid(t *testing.T, id string) int {
	t.Helper()
	pid, ok := findShimPid(id)
	if !ok {
		t.Fatalf("no containerd-shim-ipc-v2 for %s", id)
	}
	return pid
}

// findShimPid is shimPid, reporting whether there is one.
func findShimPid(id string) (int, bool) {
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-ipc-v2" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-id" && args[i+1] == id {
				return pid, true
			}
		}
	}
	return 0, false
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// TestShimKilled kills the shim with SIGKILL, as the OOM killer or an
// operator might: containerd must see the task end and its container's
// processes must not run on unserved (their IPC calls would fail with
// ENOSYS); the host tool must go on working beside the dead shim's
// sockets, and a new container with the same id must be served again.
func TestShimKilled(t *testing.T) {
	e := need(t)
	id := uniq(t, "crash")
	pid := e.start(t, id, opts{})
	want(t, e.exec(t, id, `ipct semget 0x5151 1 create; ipct setval 0x5151 0 4`), `^0\nok\n$`)
	shim := shimPid(t, id)
	var ctlSock string
	for _, sh := range ipcctlJSON(t, e).Shims {
		if sh.Shim.Pid == shim {
			ctlSock = sh.Shim.Socket
		}
	}
	if ctlSock == "" {
		t.Fatalf("ipcctl does not list shim %d", shim)
	}
	lisSock := filepath.Join(filepath.Dir(filepath.Dir(ctlSock)), filepath.Base(ctlSock))
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	deadline := killed.Add(20 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if alive(pid) {
		t.Fatalf("container init %d still runs 20 s after its shim was killed", pid)
	}
	t.Logf("container init gone %v after the shim's SIGKILL", time.Since(killed).Round(time.Millisecond))
	for {
		out, _ := e.ctrCmd(10*time.Second, "task", "ls")
		running := false
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
				running = true
			}
		}
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd still lists %s as running:\n%s", id, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// containerd runs the shim binary's delete action for the dead shim,
	// which removes its sockets; ipcctl then no longer sees them.
	for _, p := range []string{lisSock, ctlSock} {
		for {
			if _, err := os.Lstat(p); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the dead shim's socket %s is still there", p)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Other tests' shims may run (0) or none (3); 1 would be a socket
	// that does not answer.
	if out, errOut, st := ipcctlStatus(t, e); (st != 0 && st != 3) || strings.Contains(out+errOut, filepath.Base(ctlSock)) {
		t.Fatalf("ipcctl after the dead shim's clean-up: status %d, want 0 or 3, and no mention of its socket:\n%s\nstderr:\n%s", st, out, errOut)
	}
	e.remove(id)

	// The same id again: a fresh shim and a fresh, empty namespace, once
	// containerd has cleaned up after the dead shim (it runs the shim
	// binary's delete action, slow under the race detector; until then
	// the id is taken).
	args := opts{}.runArgs(e, id)
	args = append([]string{args[0], "-d", "--null-io"}, args[1:]...)
	args = append(args, "/bin/sleep", "3600")
	free := time.Now().Add(30 * time.Second)
	for {
		out, err := e.ctrCmd(60*time.Second, args...)
		if err == nil {
			break
		}
		if !strings.Contains(out, "already exists") || time.Now().After(free) {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		e.remove(id)
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { e.remove(id) })
	pid = e.pid(t, id)
	want(t, e.exec(t, id, `ipct semget 0x5151 1; ipct semget 0x5151 1 create; ipct getval 0x5151 0`), `^ERR ENOENT\n0\n0\n$`)
	e.wantKernelSets(t, pid, 0)
}
