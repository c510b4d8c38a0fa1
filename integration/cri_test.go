package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var importOnce sync.Once
var importErr error

// crictl runs crictl against the private containerd's CRI plugin.
func (e *env) crictl(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(e.ctr), "crictl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ep := "unix://" + e.sock
	c := exec.CommandContext(ctx, bin, append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "50s"}, args...)...)
	var buf, ebuf bytes.Buffer
	c.Stdout, c.Stderr = &buf, &ebuf
	if err := c.Run(); err != nil {
		t.Fatalf("crictl %s: %v\n%s%s", strings.Join(args, " "), err, buf.String(), ebuf.String())
	}
	return buf.String()
}

// criImage skips the test without crictl, and imports the ipct image
// into containerd's k8s.io namespace, once per run.
func criImage(t *testing.T, e *env) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.ctr), "crictl")); err != nil {
		missing(t, "crictl not built (scripts/build-containerd.sh)")
	}
	importOnce.Do(func() {
		tar := filepath.Join(e.dir, "ipct-image.tar")
		out, err := exec.Command("go", "run", "./mkimage", "-rootfs", e.rootfs, "-name", "localhost/ipct:1", "-o", tar, "--", "/bin/sleep", "100000000").CombinedOutput()
		if err != nil {
			importErr = &setupError{"mkimage: " + err.Error() + "\n" + string(out)}
			return
		}
		out, err = exec.Command(e.ctr, "-a", e.sock, "-n", "k8s.io", "images", "import", tar).CombinedOutput()
		if err != nil {
			importErr = &setupError{"import: " + err.Error() + "\n" + string(out)}
		}
	})
	if importErr != nil {
		t.Fatal(importErr)
	}
}

// writeFile writes s to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, s string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// crictlErr runs crictl and returns its output and error, for a command
// that may fail.
func (e *env) crictlErr(args ...string) (string, error) {
	bin := filepath.Join(filepath.Dir(e.ctr), "crictl")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ep := "unix://" + e.sock
	out, err := exec.CommandContext(ctx, bin, append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "110s"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestCRIPodRuntimeClass runs a pod through the CRI plugin with runtime
// handler "ipc" (what a Kubernetes RuntimeClass selects): CRI sends the
// generic runtimeoptions.Options, the pod's containers are served by one
// shim and share the pod's IPC namespace, with separate pid namespaces,
// and the pod's sysctls are the engine namespace's limits.
func TestCRIPodRuntimeClass(t *testing.T) {
	e := need(t)
	criImage(t, e)
	dir := t.TempDir()
	write := func(name, s string) string { return writeFile(t, dir, name, s) }
	uid := uniq(t, "u")
	pod := write("pod.json", `{"metadata":{"name":"ipcpod","namespace":"default","uid":"`+uid+`"},"log_directory":"`+dir+`",
 "linux":{"sysctls":{"kernel.sem":"100 1000 16 20","kernel.msgmni":"64"},
  "security_context":{"namespace_options":{"network":2,"pid":1,"ipc":0}}}}`)
	ctrJSON := func(name string) string {
		return write(name+".json", `{"metadata":{"name":"`+name+`"},"image":{"image":"localhost/ipct:1"},"command":["/bin/sleep","100000"],"log_path":"`+name+`.log",
 "linux":{"security_context":{"namespace_options":{"network":2,"pid":1,"ipc":0}}}}`)
	}
	podID := strings.TrimSpace(e.crictl(t, "runp", "--runtime", "ipc", pod))
	removed := false
	t.Cleanup(func() {
		if !removed {
			e.crictl(t, "stopp", podID)
			e.crictl(t, "rmp", podID)
		}
	})
	var cids []string
	for _, n := range []string{"c1", "c2"} {
		id := strings.TrimSpace(e.crictl(t, "create", podID, ctrJSON(n), pod))
		e.crictl(t, "start", id)
		cids = append(cids, id)
	}
	sh := func(i int, script string) string {
		// crictl adds a blank line after the output.
		return strings.TrimRight(e.crictl(t, "exec", "-s", cids[i], "/bin/sh", "-c", script), "\n") + "\n"
	}
	want(t, sh(0, `cat /proc/sys/kernel/sem; ipct semget 0x77 101 create; ipct semget 0x77 2 create; ipct semop 0x77 0 1`),
		`^100\s+1000\s+16\s+20\nERR EINVAL\n0\nok \d+\n$`)
	pid1 := regexp.MustCompile(`ok (\d+)`).FindStringSubmatch(sh(0, `ipct semop 0x77 1 1`))[1]
	want(t, sh(1, `ipct getval 0x77 0; ipct getpid 0x77 1`), `^1\n0\n$`)
	want(t, sh(0, `ipct getpid 0x77 1`), `^`+pid1+`\n$`)

	// One shim process for the pod: one listener socket, one engine
	// namespace created by the sandbox.
	log := e.log(t)
	want(t, log, `new engine namespace for container `+podID+`, limits sem=100 1000 16 20 msgmax=8192 msgmnb=16384 msgmni=64`)
	for _, c := range cids {
		if strings.Contains(log, "new engine namespace for container "+c) {
			t.Fatalf("container %s got its own engine namespace", c)
		}
	}
	// Message traffic across the containers, then state for the host
	// tool to find: a queued message, a SEM_UNDO holder, a semop and a
	// msgrcv asleep.
	want(t, sh(0, `ipct msgget 0x78 create >/dev/null; ipct msgsnd 0x78 3 hello; ipct msgsnd 0x78 4 abc`), `^ok\nok\n$`)
	want(t, sh(1, `ipct msgrcv 0x78 4`), `^abc\n$`)
	sh(0, `ipct hold 0x77 1 >/dev/null 2>&1 &`)
	sh(1, `ipct semop 0x77 0 -5 >/dev/null 2>&1 &`)
	sh(0, `ipct msgrcv 0x78 9 >/dev/null 2>&1 &`)
	ns := checkIpcctl(t, e, uid, podID, cids, pid1)
	checkMetrics(t, e, ns)

	e.crictl(t, "stopp", podID)
	e.crictl(t, "rmp", podID)
	removed = true
	e.waitLog(t, `last container \((`+podID+`|`+cids[0]+`|`+cids[1]+`)\) deleted, engine namespace freed`)
	// The shim is gone with the pod, its engine namespace with it.
	for i := 0; ; i++ {
		out := ipcctlJSON(t, e)
		if findNS(out, uid) == nil {
			break
		}
		if i == 50 {
			t.Fatalf("ipcctl still shows pod %s after rmp", uid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Asking for it now is "not found" (4), or "nothing running" (3)
	// when no other shim runs: a script can tell them from success.
	if _, _, st := ipcctlStatus(t, e, "-container", cids[0]); st != 3 && st != 4 {
		t.Errorf("ipcctl -container of a removed container: exit status %d, want 3 or 4", st)
	}
}

type setupError struct{ s string }

func (e *setupError) Error() string { return e.s }
