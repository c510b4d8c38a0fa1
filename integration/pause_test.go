package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPauseSleepers pauses a container whose processes sleep in semop and
// msgrcv, and looks at their objects from a second container of the same
// IPC namespace (a pod's pair), under runc's shim and under this one: every
// step must read the same. Natively the freezer wakes a sleeper as a signal
// would (kernel/freezer.c: freeze_task, fake_signal_wake_up): it leaves
// the semaphore's queue (GETNCNT 0) and the queue's receivers, is frozen
// on its way out, and after the resume restarts its call, which then
// takes what was posted meanwhile. The shim's Pause does the same to the
// sleepers it holds (Gateway.Frozen).
func TestPauseSleepers(t *testing.T) {
	e := need(t)
	runc := pauseScenario(t, e, runtimeRunc)
	ipc := pauseScenario(t, e, runtimeIPC)
	t.Logf("%s:\n%s", runtimeRunc, runc)
	t.Logf("%s:\n%s", runtimeIPC, ipc)
	diffLines(t, "paused sleepers", runc, ipc)
}

// pauseScenario runs the scenario with runtime rt and returns its
// transcript: one named line per step.
func pauseScenario(t *testing.T, e *env, rt string) string {
	t.Helper()
	group := []string{"--annotation", "io.containerd.runc.v2.group=pause-" + strconv.Itoa(os.Getpid()) + "-" + rt}
	a, b := uniq(t, "pausea"), uniq(t, "pauseb")
	apid := e.start(t, a, opts{runtime: rt, extra: group})
	e.start(t, b, opts{runtime: rt, extra: append(group, "--with-ns", "ipc:/proc/"+strconv.Itoa(apid)+"/ns/ipc")})
	var tr strings.Builder
	step := func(name, out string) { fmt.Fprintf(&tr, "%s: %q\n", name, out) }

	step("make", e.exec(t, a, `ipct semget 0x5a5a 1 create >/dev/null && ipct msgget 0x5a5b create >/dev/null && echo made`))
	e.execDetached(t, a, `exec ipct semop 0x5a5a 0 -1`)
	e.execDetached(t, a, `exec ipct msgrcv 0x5a5b 1`)
	// Both asleep in their calls (seen from the host: the same in both
	// runtimes, the shim's trap being inside the call).
	e.waitInSyscall(t, a, unix.SYS_SEMOP)
	e.waitInSyscall(t, a, unix.SYS_MSGRCV)
	step("before pause", e.exec(t, b, `ipct getncnt 0x5a5a 0; ipct getval 0x5a5a 0; ipct msgqnum 0x5a5b`))

	pause(t, e, rt, a)
	resumed := false
	t.Cleanup(func() {
		if !resumed { // a frozen task takes no SIGKILL on cgroup v1
			e.ctrCmd(20*time.Second, "task", "resume", a)
		}
	})
	step("paused", e.exec(t, b, `ipct getncnt 0x5a5a 0; ipct semop 0x5a5a 0 1 >/dev/null; ipct getval 0x5a5a 0; ipct msgsnd 0x5a5b 1 hello; ipct msgqnum 0x5a5b`))
	// Still frozen: what was posted waits for the resume.
	step("still paused", e.exec(t, b, `ipct getncnt 0x5a5a 0; ipct getval 0x5a5a 0; ipct msgqnum 0x5a5b`))

	e.ctrOK(t, "task", "resume", a)
	resumed = true
	// The restarted calls take the value and the message.
	var out string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if out = e.exec(t, b, `ipct getval 0x5a5a 0; ipct msgqnum 0x5a5b`); out == "0\n0\n" {
			break
		}
	}
	step("resumed", out)
	step("after", e.exec(t, b, `ipct getncnt 0x5a5a 0; ipct semrm 0x5a5a; ipct msgrm 0x5a5b`))
	return tr.String()
}

// waitInSyscall waits until a thread of a process of container id is
// asleep in system call nr (/proc/PID/task/TID/syscall names the call a
// blocked thread is in; a thread trapped to the shim is in its call too).
func (e *env) waitInSyscall(t *testing.T, id string, nr int) {
	t.Helper()
	want := strconv.Itoa(nr) + " "
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, pid := range e.taskPids(t, id) {
			tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/syscall")
			for _, f := range tasks {
				b, err := os.ReadFile(f)
				if err == nil && strings.HasPrefix(string(b), want) {
					return
				}
			}
		}
	}
	t.Fatalf("no process of %s asleep in system call %d", id, nr)
}

// taskPids returns the host pids of container id's processes (ctr task
// ps).
func (e *env) taskPids(t *testing.T, id string) []string {
	t.Helper()
	var pids []string
	for _, l := range strings.Split(e.ctrOK(t, "task", "ps", id), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			if _, err := strconv.Atoi(f[0]); err == nil {
				pids = append(pids, f[0])
			}
		}
	}
	return pids
}

// pause pauses container id of runtime rt. runc's freeze on cgroup v1 can
// lose to a loaded machine ("unable to freeze": it thawed the container
// again); this shim's Pause tries again itself (task.Service.Pause), runc's
// shim, the reference here, does not: its pause is tried up to 4 times,
// as the shim would.
func pause(t *testing.T, e *env, rt, id string) {
	t.Helper()
	tries := 1
	if rt == runtimeRunc {
		tries = 4
	}
	for try := 1; ; try++ {
		out, err := e.ctrCmd(60*time.Second, "task", "pause", id)
		if err == nil {
			return
		}
		if try == tries || !strings.Contains(out, "unable to freeze") {
			t.Fatalf("ctr task pause %s (%s, try %d): %v\n%s", id, rt, try, err, out)
		}
		t.Logf("ctr task pause %s (%s, try %d): %s", id, rt, try, strings.TrimSpace(out))
	}
}
