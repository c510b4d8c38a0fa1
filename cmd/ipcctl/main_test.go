package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
)

// fakeShim serves a control socket in dir, as a shim serving one
// container (id "3f2a9c", no CRI name) would, and returns its path.
func fakeShim(t *testing.T, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "5d0b7ae876f4bacfb01ee557.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	snap := control.Snapshot{
		Shim:       control.Shim{Pid: 4242, Socket: sock},
		Namespaces: []control.NamespaceState{{Inode: 4026532000, Containers: []control.Container{{ID: "3f2a9c"}}}},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/state", func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(&snap) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("# TYPE containerd_shim_ipc_waiters gauge\ncontainerd_shim_ipc_waiters{kind=\"semop\"} 0\n"))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func runIpcctl(args ...string) (status int, stdout, stderr string) {
	var o, e bytes.Buffer
	status = run(args, &o, &e)
	return status, o.String(), e.String()
}

// Each answer has its own exit status, and says on the right stream what
// it found: nothing running (3), not found (4), usage (2), shown (0).
func TestExitStatuses(t *testing.T) {
	empty, busy := t.TempDir(), t.TempDir()
	sock := fakeShim(t, busy)
	for _, c := range []struct {
		name       string
		args       []string
		status     int
		out, notIn string // in stdout, not in stdout
		err        string // in stderr
	}{
		{"nothing running", []string{"-dir", empty}, exitNothing, "no shim serves System V IPC on this node", "", ""},
		{"nothing running, metrics", []string{"-dir", empty, "metrics"}, exitNothing, "", "", "no shim serves"},
		{"nothing running, socket", []string{"-dir", empty, "socket"}, exitNothing, "", sock, ""},
		{"shown", []string{"-dir", busy}, exitShown, "shim pid 4242", "", ""},
		{"metrics", []string{"-dir", busy, "metrics"}, exitShown, "containerd_shim_ipc_waiters", "", ""},
		{"not found", []string{"-dir", busy, "-container", "nosuch"}, exitNotFound, "", "no shim serves System V IPC on this node", "no shim serves container nosuch"},
		{"not found, socket", []string{"-dir", busy, "-container", "nosuch", "socket"}, exitNotFound, "", sock, "container nosuch"},
		{"socket of a container", []string{"-dir", busy, "-container", "3f2a", "socket"}, exitShown, sock + "\n", "", ""},
		{"socket, flag after", []string{"-dir", busy, "socket", "-container", "3f2a9c"}, exitShown, sock + "\n", "", ""},
		{"unknown command", []string{"-dir", busy, "bogus"}, exitUsage, "", "", `unknown command "bogus"`},
		{"extra argument", []string{"-dir", busy, "show", "extra"}, exitUsage, "", "", `unexpected argument "extra" after show`},
		{"unknown flag", []string{"-nosuchflag"}, exitUsage, "", "", "nosuchflag"},
		{"help", []string{"-h"}, exitShown, "", "", "usage: ipcctl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out, errOut := runIpcctl(c.args...)
			if status != c.status || !strings.Contains(out, c.out) || (c.notIn != "" && strings.Contains(out, c.notIn)) || !strings.Contains(errOut, c.err) {
				t.Fatalf("ipcctl %s: status %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), status, c.status, out, errOut)
			}
		})
	}
}

// A socket that does not answer is an error, not "nothing running".
func TestDeadSocket(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "dead.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(filepath.Join(dir, "dead.sock")); err != nil {
		t.Skip("the socket file went with its listener")
	}
	for _, args := range [][]string{{"-dir", dir}, {"-dir", dir, "metrics"}} {
		if status, out, errOut := runIpcctl(args...); status != exitError {
			t.Fatalf("ipcctl %s: status %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), status, exitError, out, errOut)
		}
	}
}
