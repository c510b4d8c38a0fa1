package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
)

var (
	ipcctlOnce sync.Once
	ipcctlBin  string
	ipcctlErr  error
)

// ipcctl runs cmd/ipcctl with args and returns its stdout; an exit
// status other than shown (0), nothing running (3) or not found (4)
// fails the test.
func ipcctl(t *testing.T, e *env, args ...string) string {
	t.Helper()
	out, errOut, status := ipcctlStatus(t, e, args...)
	// 3 (no shim runs) and 4 (none holds what was asked for) are answers.
	if status != 0 && status != 3 && status != 4 {
		t.Fatalf("ipcctl %s: exit status %d\n%s\nstderr:\n%s", strings.Join(args, " "), status, out, errOut)
	}
	return out
}

// ipcctlStatus runs the built ipcctl and returns its stdout, its stderr
// (what went wrong: sockets that did not answer, what was not found) and
// its exit status.
func ipcctlStatus(t *testing.T, env *env, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	ipcctlOnce.Do(func() { // built once, into the first env's directory
		ipcctlBin = filepath.Join(env.dir, "ipcctl")
		if out, err := exec.Command("go", "build", "-o", ipcctlBin, "../cmd/ipcctl").CombinedOutput(); err != nil {
			ipcctlErr = &setupError{"build ipcctl: " + err.Error() + "\n" + string(out)}
		}
	})
	if ipcctlErr != nil {
		t.Fatal(ipcctlErr)
	}
	var o, e strings.Builder
	cmd := exec.Command(ipcctlBin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("ipcctl %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), 0
}

type ipcctlOutput struct {
	Shims []control.Snapshot `json:"shims"`
}

func ipcctlJSON(t *testing.T, e *env, args ...string) *ipcctlOutput {
	t.Helper()
	var out ipcctlOutput
	if err := json.Unmarshal([]byte(ipcctl(t, e, append([]string{"-json"}, args...)...)), &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// findNS returns the engine namespace of the pod with uid, or nil.
func findNS(out *ipcctlOutput, uid string) *control.NamespaceState {
	for _, s := range out.Shims {
		for i := range s.Namespaces {
			if p := s.Namespaces[i].Pod; p != nil && p.UID == uid {
				return &s.Namespaces[i]
			}
		}
	}
	return nil
}

// checkIpcctl checks ipcctl's JSON against the state the CRI test made:
// set 0x77 (2 sems: sem 0 = 1, sem 1 held by c1's SEM_UNDO holder, last
// semop'd there), queue 0x78 (one "hello" of type 3), a semop -5 on sem
// 0 asleep in c2 and a msgrcv of type 9 asleep in c1.
func checkIpcctl(t *testing.T, e *env, uid, podID string, cids []string, pid1 string) *control.NamespaceState {
	t.Helper()
	var ns *control.NamespaceState
	for i := 0; ; i++ {
		ns = findNS(ipcctlJSON(t, e), uid)
		if ns != nil && len(ns.Waiters) == 2 && len(ns.Undo) == 1 {
			break
		}
		if i == 200 {
			b, _ := json.MarshalIndent(ns, "", " ")
			t.Fatalf("ipcctl never showed the pod's 2 waiters and undo entry:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dump, _ := json.MarshalIndent(ns, "", " ")
	fail := func(f string, a ...any) {
		t.Helper()
		t.Fatalf(f+"\nnamespace:\n%s", append(a, dump)...)
	}
	if ns.Pod.Name != "ipcpod" || ns.Pod.Namespace != "default" || ns.Pod.SandboxID != podID {
		fail("pod %+v", ns.Pod)
	}
	names := map[string]string{}
	for _, c := range ns.Containers {
		names[c.ID] = c.Name
		if c.Sandbox && c.ID != podID {
			fail("sandbox %s is not the pod %s", c.ID, podID)
		}
	}
	if len(ns.Containers) != 3 || names[cids[0]] != "c1" || names[cids[1]] != "c2" {
		fail("containers %v", names)
	}
	if l := ns.Limits; l.SemMSL != 100 || l.SemMNS != 1000 || l.SemOPM != 16 || l.SemMNI != 20 || l.MsgMNI != 64 {
		fail("limits %+v", l)
	}
	if b := ns.Bounds; b.MaxSets != 20 || b.MaxSemaphores != 1000 || b.MaxQueues != 64 || b.MaxMsgBytes != 64*16384 {
		fail("bounds %+v", b)
	}
	if len(ns.SemSets) != 1 || len(ns.Queues) != 1 {
		fail("%d sets, %d queues", len(ns.SemSets), len(ns.Queues))
	}
	// The default view is the set's header; its semaphores come with
	// -set.
	set := ns.SemSets[0]
	if set.Perm.Key != 0x77 || set.Nsems != 2 || set.Sems != nil || set.Waiters != 1 || set.Undos != 1 || set.Otime == 0 {
		fail("set header %+v", set)
	}
	detail := findNS(ipcctlJSON(t, e, "-set", strconv.Itoa(int(set.ID)), "-ns", strconv.FormatUint(ns.Inode, 10)), uid)
	if detail == nil || len(detail.SemSets) != 1 {
		fail("ipcctl -set %d: %+v", set.ID, detail)
	}
	set = detail.SemSets[0]
	if set.Perm.Key != 0x77 || len(set.Sems) != 2 || set.Sems[0].Val != 1 || set.Sems[1].Val != 0 ||
		set.Sems[0].Ncnt != 1 || set.Sems[1].Ncnt != 0 || set.Undos != 1 {
		fail("set %+v", set)
	}
	if p := set.Sems[1].Pid; p == nil || p.ContainerID != cids[0] || p.Host == 0 {
		fail("sempid of sem 1: %+v", p)
	}
	if p := set.Sems[0].Pid; p == nil || strconv.Itoa(int(p.Container)) != pid1 && p.ContainerID != cids[0] {
		fail("sempid of sem 0: %+v", p)
	}
	q := ns.Queues[0]
	if q.Perm.Key != 0x78 || q.Messages != 1 || q.Bytes != 5 || q.Receivers != 1 || q.Senders != 0 ||
		q.Lrpid == nil || q.Lrpid.ContainerID != cids[1] || q.Lspid == nil || q.Lspid.ContainerID != cids[0] {
		fail("queue %+v", q)
	}
	if u := ns.Usage; u.Sets != 1 || u.Semaphores != 2 || u.Queues != 1 || u.Messages != 1 || u.Bytes != 5 || u.Waiters != 2 || u.UndoEntries != 1 ||
		u.SemopWaiters != 1 || u.MsgrcvWaiters != 1 || u.MsgsndWaiters != 0 || len(ns.Truncated) != 0 {
		fail("usage %+v", u)
	}
	var sw, mw *control.Waiter
	for i := range ns.Waiters {
		switch ns.Waiters[i].Kind {
		case "semop":
			sw = &ns.Waiters[i]
		case "msgrcv":
			mw = &ns.Waiters[i]
		}
	}
	if sw == nil || mw == nil {
		fail("waiters")
	}
	if sw.ID != set.ID || sw.Key != 0x77 || len(sw.Sops) != 1 || sw.Sops[0].Num != 0 || sw.Sops[0].Op != -5 || sw.Pid.ContainerID != cids[1] ||
		sw.Pid.Container == 0 || sw.Seconds < 0 || sw.Since.IsZero() {
		fail("semop waiter %+v", sw)
	}
	if mw.ID != q.ID || mw.Key != 0x78 || mw.Type != 9 || mw.Mode != "equal" || mw.Pid.ContainerID != cids[0] || mw.Since.IsZero() {
		fail("msgrcv waiter %+v", mw)
	}
	// Host pids are the processes themselves: ipct in the right container.
	for _, w := range []*control.Waiter{sw, mw} {
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(int(w.Pid.Host)) + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), "ipct") {
			fail("host pid %d of the %s waiter: %q %v", w.Pid.Host, w.Kind, cmd, err)
		}
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(int(w.Pid.Host)) + "/status")
		if m := regexp.MustCompile(`NSpid:\s+\d+\s+(\d+)`).FindSubmatch(st); m == nil || string(m[1]) != strconv.Itoa(int(w.Pid.Container)) {
			fail("container pid %d of host pid %d: status says %q", w.Pid.Container, w.Pid.Host, m)
		}
	}
	// The kernel's own IPC namespace of the pod holds nothing (the
	// container's /proc/sysvipc may be the shim's view: read the
	// kernel's from the host).
	for _, c := range ns.Containers {
		if c.InitPid == 0 {
			fail("container %s: no init pid", c.ID)
		}
	}
	kern, err := exec.Command("nsenter", "-t", strconv.Itoa(ns.Containers[1].InitPid), "-i", "--", "cat", "/proc/sysvipc/sem", "/proc/sysvipc/msg").CombinedOutput()
	if err != nil || strings.Count(string(kern), "\n") != 2 {
		fail("kernel objects in the pod's IPC namespace: %v\n%s", err, kern)
	}
	un := ns.Undo[0]
	if un.SemID != set.ID || un.Pid.ContainerID != cids[0] || len(un.Adj) != 2 || un.Adj[0] != 0 || un.Adj[1] != 1 {
		fail("undo %+v", un)
	}
	// The table names the same things.
	table := ipcctl(t, e, "-pod", "default/ipcpod")
	for _, s := range []string{"pod default/ipcpod", "0x00000077", "0x00000078", "sem0-5", "type 9", "sem1+1", "c1", "c2"} {
		if !strings.Contains(table, s) {
			t.Fatalf("ipcctl table lacks %q:\n%s", s, table)
		}
	}
	t.Logf("ipcctl:\n%s", table)
	table = ipcctl(t, e, "-set", strconv.Itoa(int(set.ID)), "-ns", strconv.FormatUint(ns.Inode, 10))
	if !strings.Contains(table, "Semaphores 0-1 of 2 of set") {
		t.Fatalf("ipcctl -set lacks the set's semaphores:\n%s", table)
	}
	t.Logf("ipcctl -set %d:\n%s", set.ID, table)
	// A list cut at the limit says so.
	if cut := findNS(ipcctlJSON(t, e, "-limit", "1"), uid); cut == nil || !slices.Contains(cut.Truncated, "waiters") || len(cut.Waiters) != 1 {
		fail("ipcctl -limit 1: %+v", cut)
	}
	return ns
}

// checkMetrics scrapes the shims' metrics through ipcctl and checks the
// pod's series against the same state.
func checkMetrics(t *testing.T, e *env, ns *control.NamespaceState) {
	t.Helper()
	text := ipcctl(t, e, "metrics")
	sel := []string{`ipc_ns="` + strconv.FormatUint(ns.Inode, 10) + `"`, `pod="ipcpod"`, `pod_namespace="default"`}
	value := func(name, labels string) float64 {
		t.Helper()
		re := regexp.MustCompile(`(?m)^` + name + `\{([^}]*)\} (\S+)$`)
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			ok := true
			for _, l := range append(strings.Split(labels, ","), sel...) {
				ok = ok && (l == "" || strings.Contains(m[1], l))
			}
			if ok {
				v, _ := strconv.ParseFloat(m[2], 64)
				return v
			}
		}
		t.Fatalf("no %s{%s} for the pod in\n%s", name, labels, text)
		return 0
	}
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"containerd_shim_ipc_waiters", `kind="semop"`, 1},
		{"containerd_shim_ipc_waiters", `kind="msgrcv"`, 1},
		{"containerd_shim_ipc_waiters", `kind="msgsnd"`, 0},
		{"containerd_shim_ipc_objects", `kind="sem_set"`, 1},
		{"containerd_shim_ipc_objects", `kind="msg_queue"`, 1},
		{"containerd_shim_ipc_semaphores", "", 2},
		{"containerd_shim_ipc_queued_messages", "", 1},
		{"containerd_shim_ipc_queued_bytes", "", 5},
		{"containerd_shim_ipc_undo_entries", "", 1},
		{"containerd_shim_ipc_limit", `sysctl="semmni"`, 20},
		{"containerd_shim_ipc_limit", `sysctl="msgmni"`, 64},
		{"containerd_shim_ipc_bound", `resource="sets"`, 20},
		{"containerd_shim_ipc_bound", `resource="msg_bytes"`, 64 * 16384},
		{"containerd_shim_ipc_calls_total", `syscall="semget",errno="EINVAL"`, 1},
		{"containerd_shim_ipc_calls_total", `syscall="msgsnd",errno="OK"`, 2},
		{"containerd_shim_ipc_calls_total", `syscall="msgrcv",errno="OK"`, 1},
	} {
		if v := value(c.name, c.labels); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// semop: at least the four that returned (two +1, the holder's -1,
	// none of the sleepers); semget's latency histogram counted them.
	if v := value("containerd_shim_ipc_calls_total", `syscall="semop",errno="OK"`); v < 3 {
		t.Errorf("semop OK calls %v, want >= 3", v)
	}
	if v := value("containerd_shim_ipc_call_duration_seconds_count", `syscall="semget",slept="false"`); v < 3 {
		t.Errorf("semget latency count %v, want >= 3", v)
	}
}
