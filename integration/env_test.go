// Package integration runs the shim under a real containerd (built from
// the Go module proxy by scripts/build-containerd.sh), Debian's runc and a
// busybox rootfs with ipct, the static IPC tool. The tests need root; they
// skip with the reason when something is missing.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	runtimeIPC  = "io.containerd.ipc.v2"
	runtimeRunc = "io.containerd.runc.v2"
	ctrNS       = "ipctest"
)

// env is the private containerd the tests share.
type env struct {
	dir, sock, ctr, rootfs string
}

var (
	setupOnce sync.Once
	theEnv    *env
	skipWhy   string
)

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}

// need returns the environment or skips the test.
func need(t *testing.T) *env {
	t.Helper()
	setupOnce.Do(setup)
	if theEnv == nil {
		t.Skip("integration: " + skipWhy)
	}
	return theEnv
}

func setup() {
	if testing.Short() {
		skipWhy = "skipped in -short mode (they start containerd and containers)"
		return
	}
	if os.Geteuid() != 0 {
		skipWhy = "needs root (containerd, runc and seccomp listeners); run `sudo make test`"
		return
	}
	root := repoRoot()
	bin := filepath.Join(root, "build", "containerd")
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			skipWhy = fmt.Sprintf("%s/%s missing: run scripts/install-runtime-deps.sh (make integration-deps)", bin, b)
			return
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		skipWhy = "runc not installed: run scripts/install-runtime-deps.sh (apt-get install runc busybox-static)"
		return
	}
	dir, err := os.MkdirTemp("", "shim-ipc-it-")
	if err != nil {
		skipWhy = err.Error()
		return
	}
	fail := func(f string, a ...any) {
		skipWhy = "setup failed: " + fmt.Sprintf(f, a...)
		// A broken setup is a failure, not a skip: TestMain reports it.
		setupErr = skipWhy
	}
	shimDir := filepath.Join(dir, "bin")
	build := []string{"build", "-o", filepath.Join(shimDir, "containerd-shim-ipc-v2")}
	if os.Getenv("SHIM_RACE") != "" {
		// The shim under the race detector: a race it hits is reported
		// into containerd's log, which TestMain checks.
		build = append(build, "-race")
	}
	if out, err := exec.Command("go", append(build, "../cmd/containerd-shim-ipc-v2")...).CombinedOutput(); err != nil {
		fail("build shim: %v\n%s", err, out)
		return
	}
	rootfs := filepath.Join(dir, "rootfs")
	if out, err := exec.Command(filepath.Join(root, "scripts", "make-rootfs.sh"), rootfs).CombinedOutput(); err != nil {
		fail("rootfs: %v\n%s", err, out)
		return
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "containerd-env.sh"), "start", filepath.Join(dir, "d"))
	cmd.Env = append(os.Environ(), "SHIM_BIN="+shimDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		fail("containerd: %v\n%s", err, out)
		return
	}
	theEnv = &env{dir: dir, sock: filepath.Join(dir, "d", "containerd.sock"), ctr: filepath.Join(bin, "ctr"), rootfs: rootfs}
}

var setupErr string

// missing skips the test for want of something the install steps provide
// (crictl, the Debian rootfs), or fails it when they ran
// (INTEGRATION_REQUIRED: make test, make integration).
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("INTEGRATION_REQUIRED") != "" {
		t.Fatal(why + " (INTEGRATION_REQUIRED is set)")
	}
	t.Skip(why)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if theEnv != nil && os.Getenv("SHIM_RACE") != "" {
		log := filepath.Join(theEnv.dir, "d", "containerd.log")
		b, _ := os.ReadFile(log)
		ours, theirs := races(string(b))
		if theirs > 0 {
			fmt.Fprintf(os.Stderr, "integration: %d data race report(s) entirely in code the shim imports (containerd's runc shim), not failing; see %s\n", theirs, log)
		}
		if ours > 0 {
			fmt.Fprintf(os.Stderr, "integration: the race detector reported %d data race(s) in the shim's own code; see %s\n", ours, log)
			code = 1
		}
		if ours+theirs > 0 {
			os.Setenv("KEEP_IT", "1")
		}
	}
	if theEnv != nil {
		exec.Command(filepath.Join(repoRoot(), "scripts", "containerd-env.sh"), "stop", filepath.Join(theEnv.dir, "d")).Run()
		if os.Getenv("KEEP_IT") == "" {
			os.RemoveAll(theEnv.dir)
		} else {
			fmt.Println("integration: kept", theEnv.dir)
		}
	}
	if setupErr != "" {
		fmt.Fprintln(os.Stderr, "integration:", setupErr)
		code = 1
	}
	if theEnv == nil && skipWhy != "" && os.Getenv("INTEGRATION_REQUIRED") != "" {
		// make test installed what these tests need: that they skipped
		// all the same is a failure, not a pass of nothing.
		fmt.Fprintln(os.Stderr, "integration: INTEGRATION_REQUIRED is set, but the tests skipped:", skipWhy)
		code = 1
	}
	os.Exit(code)
}

// races counts the race detector's reports in a log: those with a frame of
// this module's own code (not a generated method that only delegates to
// runc's task service), and the others.
func races(log string) (ours, theirs int) {
	const module = "github.com/containerd-shim-ipc/containerd-shim-ipc/"
	for _, r := range strings.Split(log, "WARNING: DATA RACE")[1:] {
		r, _, _ = strings.Cut(r, "==================")
		lines := strings.Split(r, "\n")
		mine := false
		for i, l := range lines {
			if strings.Contains(l, module) && i+1 < len(lines) && !strings.Contains(lines[i+1], "<autogenerated>") {
				mine = true
			}
		}
		if mine {
			ours++
		} else {
			theirs++
		}
	}
	return ours, theirs
}

// ctrCmd runs ctr with args and returns its combined output.
func (e *env) ctrCmd(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	all := append([]string{"-a", e.sock, "-n", ctrNS}, args...)
	var buf bytes.Buffer
	c := exec.CommandContext(ctx, e.ctr, all...)
	c.Stdout, c.Stderr = &buf, &buf
	err := c.Run()
	return dropWarnings(buf.String()), err
}

var warnLine = regexp.MustCompile(`(?m)^time=.*level=warning.*\n?`)

func dropWarnings(s string) string { return warnLine.ReplaceAllString(s, "") }

// ctrOK is ctrCmd that fails the test on error.
func (e *env) ctrOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.ctrCmd(60*time.Second, args...)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

type opts struct {
	runtime string
	extra   []string
	path    string // PATH in the container; /bin by default
	rootfs  string // the busybox rootfs by default
}

func (o opts) runArgs(e *env, id string) []string {
	rt := o.runtime
	if rt == "" {
		rt = runtimeIPC
	}
	path := o.path
	if path == "" {
		path = "/bin"
	}
	rootfs := o.rootfs
	if rootfs == "" {
		rootfs = e.rootfs
	}
	a := []string{"run", "--env", "PATH=" + path, "--runtime", rt, "--rootfs"}
	a = append(a, o.extra...)
	return append(a[:len(a):len(a)], rootfs, id)
}

// run runs sh -c script in a new container and returns its output.
func (e *env) run(t *testing.T, id, script string, o opts) string {
	t.Helper()
	args := o.runArgs(e, id)
	return e.ctrLogged(t, args[:1], append(append([]string{"--rm"}, args[1:]...), "/bin/sh", "-c", script), nil)
}

var logSeq int

// ctrLogged is ctrOK for a ctr command that runs a process and waits for
// it (sub is "run" with --rm, or "task", "exec"): the process's stdout and
// stderr go to a file the shim writes (--log-uri file://), read once the
// shim has deleted the process (done, if not nil, makes sure it has) and so
// has copied all of it; ctr's own output follows.
//
// Not through ctr's FIFOs: containerd v2.3.7's client closes its FIFO
// readers (cio.Cancel, which closes them since containerd#8334) whether or
// not they have read what the shim copied in last: `ctr task exec` in its
// deferred process.Delete, right after the shim's delete returns
// (containerd#13931 drains first, after v2.3.7), `ctr run` in task.Delete
// before the shim's. On a loaded host the output came back cut or empty:
// an exec's 2 MB, read slowly, lost its last 33,920 or 58,496 bytes 4
// times in 5.
func (e *env) ctrLogged(t *testing.T, sub, rest []string, done func()) string {
	t.Helper()
	out, err := e.ctrLoggedErr(t, 60*time.Second, sub, rest, done)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(append(sub[:len(sub):len(sub)], rest...), " "), err, out)
	}
	return out
}

// ctrLoggedErr is ctrLogged for a process that may fail or be killed:
// ctr's error (the process's exit status) is returned with the output,
// not fatal.
func (e *env) ctrLoggedErr(t *testing.T, timeout time.Duration, sub, rest []string, done func()) (string, error) {
	t.Helper()
	logSeq++
	f := filepath.Join(e.dir, "io", fmt.Sprintf("%d.log", logSeq))
	args := append(append(sub[:len(sub):len(sub)], "--log-uri", "file://"+f), rest...)
	out, err := e.ctrCmd(timeout, args...)
	if done != nil {
		done()
	}
	b, rerr := os.ReadFile(f)
	if rerr != nil {
		if err != nil {
			return out, err // ctr failed before the shim made the file
		}
		t.Fatalf("ctr %s: the process's output: %v", strings.Join(args, " "), rerr)
	}
	os.Remove(f)
	return string(b) + out, err
}

// start starts a container whose init sleeps, and registers its removal.
func (e *env) start(t *testing.T, id string, o opts) int {
	t.Helper()
	args := o.runArgs(e, id)
	args = append([]string{args[0], "-d", "--null-io"}, args[1:]...)
	e.ctrOK(t, append(args, "/bin/sleep", "3600")...)
	t.Cleanup(func() { e.remove(id) })
	return e.pid(t, id)
}

// remove kills and deletes container id.
func (e *env) remove(id string) {
	e.ctrCmd(20*time.Second, "task", "kill", "-s", "SIGKILL", id)
	for i := 0; i < 50; i++ {
		if _, err := e.ctrCmd(20*time.Second, "task", "delete", id); err == nil {
			break
		}
		out, _ := e.ctrCmd(10*time.Second, "task", "ls", "-q")
		if !strings.Contains(out, id) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.ctrCmd(20*time.Second, "container", "delete", id)
}

// stop kills and deletes the task of id (keeping nothing), failing the
// test if that fails.
func (e *env) stop(t *testing.T, id string) {
	t.Helper()
	e.ctrCmd(20*time.Second, "task", "kill", "-s", "SIGKILL", id)
	var out string
	var err error
	for i := 0; i < 50; i++ {
		if out, err = e.ctrCmd(20*time.Second, "task", "delete", id); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("task delete %s: %v\n%s", id, err, out)
	}
	e.ctrCmd(20*time.Second, "container", "delete", id)
}

var execSeq int

// exec runs sh -c script as a process of container id and returns its
// output (ctrLogged).
func (e *env) exec(t *testing.T, id, script string) string {
	t.Helper()
	return e.execFor(t, id, script, 60*time.Second)
}

// execFor is exec for a script that may take up to timeout.
func (e *env) execFor(t *testing.T, id, script string, timeout time.Duration) string {
	t.Helper()
	execSeq++
	xid := fmt.Sprintf("x%d", execSeq)
	args := []string{"--exec-id", xid, id, "/bin/sh", "-c", script}
	out, err := e.ctrLoggedErr(t, timeout, []string{"task", "exec"}, args, func() { e.execDeleted(t, id, xid) })
	if err != nil {
		t.Fatalf("ctr task exec %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// execDeleted makes sure exec xid of container id is deleted, so that the
// shim has written all its output: ctr exec deletes it, but ignores an
// error (its state query has a 2 s deadline in containerd).
func (e *env) execDeleted(t *testing.T, id, xid string) {
	t.Helper()
	out, err := e.ctrCmd(60*time.Second, "task", "delete", "--exec-id", xid, id)
	if err != nil && !strings.Contains(out, "not found") {
		t.Fatalf("ctr task delete --exec-id %s %s: %v\n%s", xid, id, err, out)
	}
}

// execDetached starts sh -c script as a process of container id, without
// waiting, and returns its exec id.
func (e *env) execDetached(t *testing.T, id, script string) string {
	t.Helper()
	execSeq++
	xid := fmt.Sprintf("d%d", execSeq)
	e.ctrOK(t, "task", "exec", "--detach", "--exec-id", xid, id, "/bin/sh", "-c", script)
	return xid
}

// pid returns the host pid of container id's init.
func (e *env) pid(t *testing.T, id string) int {
	t.Helper()
	out := e.ctrOK(t, "task", "ls")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == id {
			p, err := strconv.Atoi(f[1])
			if err == nil {
				return p
			}
		}
	}
	t.Fatalf("no task %s in\n%s", id, out)
	return 0
}

// log returns containerd's log (the shims log into it).
func (e *env) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "d", "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitLog waits until containerd's log matches re.
func (e *env) waitLog(t *testing.T, re string) {
	t.Helper()
	r := regexp.MustCompile(re)
	for i := 0; i < 100; i++ {
		if r.MatchString(e.log(t)) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("containerd log never matched %q", re)
}

// uniq returns a container id unique to this run.
func uniq(t *testing.T, s string) string {
	return fmt.Sprintf("%s-%d", s, time.Now().UnixNano()%1000000)
}

// kernelSets returns "kernel-sets=N", N the semaphore sets the kernel
// holds in the IPC namespace of host pid, read from the host: inside a
// container of this shim /proc/sysvipc shows the engine's objects.
func (e *env) kernelSets(t *testing.T, pid int) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--ipc=/proc/"+strconv.Itoa(pid)+"/ns/ipc", "cat", "/proc/sysvipc/sem").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	return fmt.Sprintf("kernel-sets=%d", len(strings.Split(strings.TrimSpace(string(out)), "\n"))-1)
}

// wantKernelSets checks kernelSets against n.
func (e *env) wantKernelSets(t *testing.T, pid, n int) {
	t.Helper()
	if got := e.kernelSets(t, pid); got != fmt.Sprintf("kernel-sets=%d", n) {
		t.Fatalf("%s in the container's kernel IPC namespace, want %d", got, n)
	}
}
