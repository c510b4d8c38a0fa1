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
// container (id "3f2a9c", no CRI name) with semaphore set 0 would, and
// returns its path.
func fakeShim(t *testing.T, dir string) string {
	return fakeShimOf(t, dir, "5d0b7ae876f4bacfb01ee557", control.NamespaceState{Inode: 4026532000, Containers: []control.Container{{ID: "3f2a9c"}}})
}

// fakeShimOf serves a control socket dir/name.sock, as a shim serving the
// namespaces nss would (each with semaphore set 0), and returns its path.
func fakeShimOf(t *testing.T, dir, name string, nss ...control.NamespaceState) string {
	t.Helper()
	sock := filepath.Join(dir, name+".sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/state", func(w http.ResponseWriter, r *http.Request) {
		snap := control.Snapshot{Shim: control.Shim{Pid: 4242, Socket: sock}}
		for _, n := range nss {
			// As the shim: -set ID gives that set alone, if it exists.
			if set := r.URL.Query().Get("set"); set == "" || set == "0" {
				n.SemSets = []control.SemSet{{ID: 0, Nsems: 1}}
			}
			snap.Namespaces = append(snap.Namespaces, n)
		}
		_ = json.NewEncoder(w).Encode(&snap)
	})
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
		{"nothing running", []string{"-dir", empty}, exitNothing, "", "no shim", "no shim serves System V IPC on this node"},
		{"nothing running, metrics", []string{"-dir", empty, "metrics"}, exitNothing, "", "", "no shim serves"},
		{"nothing running, socket", []string{"-dir", empty, "socket"}, exitNothing, "", sock, "no shim serves System V IPC on this node"},
		{"shown", []string{"-dir", busy}, exitShown, "shim pid 4242", "", ""},
		{"metrics", []string{"-dir", busy, "metrics"}, exitShown, "containerd_shim_ipc_waiters", "", ""},
		{"not found", []string{"-dir", busy, "-container", "nosuch"}, exitNotFound, "", "no shim serves System V IPC on this node", "no shim serves container nosuch"},
		{"not found, socket", []string{"-dir", busy, "-container", "nosuch", "socket"}, exitNotFound, "", sock, "container nosuch"},
		{"socket of a container", []string{"-dir", busy, "-container", "3f2a", "socket"}, exitShown, sock + "\n", "", ""},
		{"socket, flag after", []string{"-dir", busy, "socket", "-container", "3f2a9c"}, exitShown, sock + "\n", "", ""},
		{"unknown command", []string{"-dir", busy, "bogus"}, exitUsage, "", "", `unknown command "bogus"`},
		{"extra argument", []string{"-dir", busy, "show", "extra"}, exitUsage, "", "", `unexpected argument "extra" after show`},
		{"unknown flag", []string{"-nosuchflag"}, exitUsage, "", "", "nosuchflag"},
		{"help", []string{"-h"}, exitShown, "", "", "4 shims run but none holds"},
		{"set", []string{"-dir", busy, "-set", "0"}, exitShown, "Semaphore Arrays", "", ""},
		{"no such set", []string{"-dir", busy, "-set", "7"}, exitNotFound, "", "Semaphore Arrays", "no semaphore set 7"},
		{"no such set, json", []string{"-dir", busy, "-json", "-set", "7"}, exitNotFound, `"shims"`, "", "no semaphore set 7"},
		{"negative set", []string{"-dir", busy, "-set", "-2"}, exitUsage, "", "", "-set -2"},
		{"negative offset", []string{"-dir", busy, "-offset", "-3"}, exitUsage, "", "", "-offset -3: want a number from 0 to"},
		{"negative limit", []string{"-dir", busy, "waiters", "-limit", "-1"}, exitUsage, "", "", "-limit -1"},
		{"flag of another command", []string{"-dir", busy, "-container", "3f2a9c", "metrics"}, exitUsage, "", "", "-container does not apply to metrics"},
		{"set with waiters", []string{"-dir", busy, "-set", "0", "waiters"}, exitUsage, "", "", "-set does not apply to waiters"},
		{"listen without exporter", []string{"-dir", busy, "-listen", ":1"}, exitUsage, "", "", "-listen does not apply to show"},
		{"set beyond int32", []string{"-dir", busy, "-set", "4294967296"}, exitUsage, "", "", "-set 4294967296"},
		{"offset beyond int32", []string{"-dir", busy, "-offset", "2147483648"}, exitUsage, "", "", "-offset 2147483648"},
		{"no timeout", []string{"-dir", busy, "-timeout", "0"}, exitUsage, "", "", "-timeout 0s"},
		{"help after the command", []string{"show", "-h"}, exitShown, "", "", "usage: ipcctl"},
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
	for _, args := range [][]string{{"-dir", dir}, {"-dir", dir, "metrics"}, {"-dir", dir, "socket"}} {
		status, out, errOut := runIpcctl(args...)
		if status != exitError || out != "" || !strings.Contains(errOut, "dead.sock") || strings.Contains(errOut, "no shim serves") {
			t.Fatalf("ipcctl %s: status %d, want %d, the dead socket named on stderr\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), status, exitError, out, errOut)
		}
	}
}

// A -container that matches containers of several namespaces is
// refused (socket would print several shims): an id prefix they share, or
// a CRI name that repeats across a Deployment's pods. Containers of one
// pod share its namespace; -pod narrows a repeated name down to one.
func TestAmbiguousContainer(t *testing.T) {
	dir := t.TempDir()
	pod := func(name string, ctrs ...control.Container) control.NamespaceState {
		return control.NamespaceState{Inode: uint64(len(name)), Pod: &control.Pod{Namespace: "default", Name: name}, Containers: ctrs}
	}
	a := fakeShimOf(t, dir, "a", pod("web-1", control.Container{ID: "3f2a9c", Name: "app"}, control.Container{ID: "3f2a77", Name: "sidecar"}))
	b := fakeShimOf(t, dir, "b", pod("web-22", control.Container{ID: "3f2b01", Name: "app"}))
	for _, c := range []struct {
		args   []string
		status int
		out    string
		err    string
	}{
		{[]string{"-container", "3f2a"}, exitShown, a + "\n", ""}, // two containers, one pod
		{[]string{"-container", "3f2"}, exitUsage, "", "containers of 2 namespaces match (pod default/web-1: 3f2a9c, 3f2a77; pod default/web-22: 3f2b01)"},
		{[]string{"-container", "app"}, exitUsage, "", "containers of 2 namespaces match"},
		{[]string{"-container", "app", "-pod", "web-22"}, exitShown, b + "\n", ""},
		{[]string{"-container", "3f2b"}, exitShown, b + "\n", ""},
		{[]string{"-container", "3f2a", "-pod", "web-22"}, exitNotFound, "", "no shim serves pod web-22"},
	} {
		args := append([]string{"-dir", dir}, c.args...)
		status, out, errOut := runIpcctl(append(args, "socket")...)
		if status != c.status || out != c.out || !strings.Contains(errOut, c.err) {
			t.Errorf("ipcctl %s socket: status %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), status, c.status, out, errOut)
		}
	}
}

// The exporter says it serves only once it does: an address it cannot
// listen on is an error, with no "serving" line before it.
func TestExporterBadAddress(t *testing.T) {
	status, _, errOut := runIpcctl("-dir", t.TempDir(), "exporter", "-listen", "bogus")
	if status != exitError || strings.Contains(errOut, "serving") || !strings.Contains(errOut, "bogus") {
		t.Fatalf("ipcctl exporter -listen bogus: status %d, want %d\nstderr:\n%s", status, exitError, errOut)
	}
}
