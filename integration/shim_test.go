package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// want fails the test unless out matches re. An ENOSYS in out fails it
// whatever re says (unless re expects one): the shim answers every trapped
// call, ENOSYS means a call reached no engine.
func want(t *testing.T, out string, re string) {
	t.Helper()
	if strings.Contains(out, "ENOSYS") && !strings.Contains(re, "ENOSYS") {
		t.Fatalf("a call answered ENOSYS:\n%s", out)
	}
	if !regexp.MustCompile(re).MatchString(out) {
		t.Fatalf("output does not match %q:\n%s", re, out)
	}
}

func TestSemaphoreServedByEngine(t *testing.T) {
	e := need(t)
	script := `ipct semget 0x1234 1 create; ipct setval 0x1234 0 5; ipct semop 0x1234 0 -2; ipct getval 0x1234 0`
	id := uniq(t, "sem")
	pid := e.start(t, id, opts{})
	want(t, e.exec(t, id, script), `(?s)^0\nok\nok \d+\n3\n$`)
	e.wantKernelSets(t, pid, 0)
	// The same under runc's shim: the kernel holds the set.
	id = uniq(t, "semrunc")
	pid = e.start(t, id, opts{runtime: runtimeRunc})
	want(t, e.exec(t, id, script), `(?s)^0\nok\nok \d+\n3\n$`)
	e.wantKernelSets(t, pid, 1)
}

func TestDefaultSeccompProfile(t *testing.T) {
	e := need(t)
	id := uniq(t, "seccomp")
	pid := e.start(t, id, opts{extra: []string{"--seccomp"}})
	want(t, e.exec(t, id, `ipct semget 0x1234 1 create; ipct semop 0x1234 0 1; ipct getval 0x1234 0`), `(?s)^0\nok \d+\n1\n$`)
	e.wantKernelSets(t, pid, 0)
}

func TestIsolation(t *testing.T) {
	e := need(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"separate-shims", nil},
		// One shim process serving both (same group): still two
		// IPC namespaces, two engine namespaces.
		{"one-shim", []string{"--annotation", "io.containerd.runc.v2.group=iso-" + strconv.Itoa(os.Getpid())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := uniq(t, "isoa"), uniq(t, "isob")
			e.start(t, a, opts{extra: tc.extra})
			e.start(t, b, opts{extra: tc.extra})
			want(t, e.exec(t, a, `ipct semget 0x4242 1 create; ipct setval 0x4242 0 7`), `^0\nok\n$`)
			// b sees no object with a's key, and cannot remove a's by id.
			want(t, e.exec(t, b, `ipct semget 0x4242 1; ipct semrmid 0; true`), `^ERR ENOENT\nERR EINVAL\n$`)
			// b makes its own with the same key: a different object.
			want(t, e.exec(t, b, `ipct semget 0x4242 1 create; ipct getval 0x4242 0; ipct setval 0x4242 0 3; ipct semrm 0x4242`), `^0\n0\nok\nok\n$`)
			want(t, e.exec(t, a, `ipct getval 0x4242 0`), `^7\n$`)
		})
	}
}

func TestPodPairSeparatePidNamespaces(t *testing.T) {
	e := need(t)
	group := []string{"--annotation", "io.containerd.runc.v2.group=pod-" + strconv.Itoa(os.Getpid())}
	a, b := uniq(t, "poda"), uniq(t, "podb")
	apid := e.start(t, a, opts{extra: group})
	e.start(t, b, opts{extra: append(group, "--with-ns", "ipc:/proc/"+strconv.Itoa(apid)+"/ns/ipc")})

	out := e.exec(t, a, `ipct semget 0x5151 2 create; ipct semop 0x5151 0 1`)
	m := regexp.MustCompile(`^0\nok (\d+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out)
	}
	pidA := m[1]
	// Same object from both; GETPID of a's process is 0 in b's pid
	// namespace and the right pid in a's.
	want(t, e.exec(t, b, `ipct getval 0x5151 0; ipct getpid 0x5151 0`), `^1\n0\n$`)
	e.wantKernelSets(t, apid, 0)
	want(t, e.exec(t, a, `ipct getpid 0x5151 0`), `^`+pidA+`\n$`)
	// And the other way round, on semaphore 1.
	out = e.exec(t, b, `ipct semop 0x5151 1 1`)
	m = regexp.MustCompile(`^ok (\d+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out)
	}
	want(t, e.exec(t, b, `ipct getpid 0x5151 1`), `^`+m[1]+`\n$`)
	want(t, e.exec(t, a, `ipct getpid 0x5151 1; ipct getval 0x5151 1`), `^0\n1\n$`)

	// Deleting b keeps the namespace (a is in it); deleting a frees it.
	e.stop(t, b)
	want(t, e.exec(t, a, `ipct getval 0x5151 0`), `^1\n$`)
	if regexp.MustCompile(`last container \(` + a + `\)`).MatchString(e.log(t)) {
		t.Fatal("namespace freed while a was alive")
	}
	e.stop(t, a)
	e.waitLog(t, `last container \(`+a+`\) deleted, engine namespace freed`)
}

func TestSemUndoAfterKill(t *testing.T) {
	e := need(t)
	a := uniq(t, "undo")
	e.start(t, a, opts{})
	want(t, e.exec(t, a, `ipct semget 0x7070 1 create; ipct setval 0x7070 0 1`), `^0\nok\n$`)
	xid := e.execDetached(t, a, `exec ipct hold 0x7070 0`)
	var out string
	for i := 0; i < 50; i++ {
		if out = e.exec(t, a, `ipct getval 0x7070 0`); out == "0\n" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out != "0\n" {
		t.Fatalf("holder did not take the semaphore: %q", out)
	}
	e.ctrOK(t, "task", "kill", "--exec-id", xid, "-s", "SIGKILL", a)
	for i := 0; i < 50; i++ {
		if out = e.exec(t, a, `ipct getval 0x7070 0`); out == "1\n" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out != "1\n" {
		t.Fatalf("SEM_UNDO not applied after kill -9: value %q", out)
	}
	// Stop and delete: the namespace is freed.
	e.stop(t, a)
	e.waitLog(t, `last container \(`+a+`\) deleted, engine namespace freed`)
}

func TestExecSharesContainerObjects(t *testing.T) {
	e := need(t)
	a := uniq(t, "exec")
	apid := e.start(t, a, opts{})
	want(t, e.exec(t, a, `ipct semget 0x3131 1 create; ipct setval 0x3131 0 9`), `^0\nok\n$`)
	want(t, e.exec(t, a, `ipct semget 0x3131 1; ipct getval 0x3131 0`), `^0\n9\n$`)
	e.wantKernelSets(t, apid, 0)
}

func TestExecSharesContainerQueues(t *testing.T) {
	e := need(t)
	a := uniq(t, "execq")
	e.start(t, a, opts{})
	want(t, e.exec(t, a, `ipct msgget 0x3132 create; ipct msgsnd 0x3132 1 hello`), `^0\nok\n$`)
	want(t, e.exec(t, a, `ipct msgrcv 0x3132 1`), `^hello\n$`)
}

func TestSemaphoreAndQueueShared(t *testing.T) {
	e := need(t)
	script := `ipct semget 0x1111 1 create >/dev/null; ipct setval 0x1111 0 1 >/dev/null
ipct msgget 0x2222 create >/dev/null; ipct msgsnd 0x2222 1 0 >/dev/null
ipct worker 0x1111 0x2222 200 & ipct worker 0x1111 0x2222 200 & wait
echo counter=$(ipct msgrcv 0x2222 1)`
	want(t, e.run(t, uniq(t, "workers"), script, opts{}), `counter=400\n$`)
}

func TestHostIPCNamespaceIsNotTrapped(t *testing.T) {
	e := need(t)
	// The test's own IPC namespace is the host's (the shim's). Other
	// programs share it, so the key is one no set has now, and the set is
	// removed whatever the outcome.
	key := freeHostSemKey(t)
	t.Cleanup(func() {
		if id, _, errno := unix.Syscall(unix.SYS_SEMGET, key, 0, 0); errno == 0 {
			unix.Syscall6(unix.SYS_SEMCTL, id, 0, 0 /* IPC_RMID */, 0, 0, 0)
		}
	})
	hostNS := "ipc:/proc/" + strconv.Itoa(os.Getpid()) + "/ns/ipc"
	cmd := fmt.Sprintf("ipct semget %#x 1 create excl", key)
	out := e.run(t, uniq(t, "host"), cmd, opts{extra: []string{"--with-ns", hostNS}})
	want(t, out, `^\d+\n$`)
	if _, _, errno := unix.Syscall(unix.SYS_SEMGET, key, 0, 0); errno != 0 {
		t.Fatalf("the host kernel has no set with the key the container made: %v", errno)
	}
	if !strings.Contains(e.log(t), "host IPC namespace") {
		t.Fatal("shim did not log the pass-through")
	}
}

// freeHostSemKey returns a key with no semaphore set in the test's IPC
// namespace.
func freeHostSemKey(t *testing.T) uintptr {
	t.Helper()
	base := uintptr(0x6d6d0000) | uintptr(os.Getpid()&0xffff)
	for i := uintptr(0); i < 64; i++ {
		key := base + i<<16
		_, _, errno := unix.Syscall(unix.SYS_SEMGET, key, 0, 0)
		if errno == unix.ENOENT {
			return key
		}
	}
	t.Fatal("no free semaphore key in the host IPC namespace")
	return 0
}

func TestRefuseProfileWithListener(t *testing.T) {
	e := need(t)
	prof := map[string]any{
		"defaultAction": "SCMP_ACT_ALLOW",
		"listenerPath":  "/run/someone-else.sock",
		"syscalls":      []any{},
	}
	b, _ := json.Marshal(prof)
	p := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	id := uniq(t, "refuse")
	args := opts{extra: []string{"--seccomp", "--seccomp-profile", p}}.runArgs(e, id)
	args = append([]string{args[0], "--rm"}, args[1:]...)
	out, err := e.ctrCmd(30*time.Second, append(args, "/bin/true")...)
	defer e.remove(id)
	if err == nil {
		t.Fatalf("container with a listenerPath profile ran:\n%s", out)
	}
	want(t, out, `already has a listenerPath \(/run/someone-else.sock\).*remove listenerPath from the profile, or run this container with runtime io.containerd.runc.v2`)
}

func TestSysctlLimits(t *testing.T) {
	e := need(t)
	// ctr has no --sysctl: write the spec with ctr's own generator, then
	// add linux.sysctl.
	id := uniq(t, "sysctl")
	dump := filepath.Join(t.TempDir(), "config.json")
	args := opts{}.runArgs(e, id+"-gen")
	args = append([]string{args[0], "--rm", "--dump-config", dump}, args[1:]...)
	e.ctrOK(t, append(args, "/bin/true")...)
	var spec map[string]any
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	linux := spec["linux"].(map[string]any)
	linux["sysctl"] = map[string]string{"kernel.sem": "5 40 8 2", "kernel.msgmni": "3", "kernel.msgmax": "16"}
	spec["process"].(map[string]any)["args"] = []string{"/bin/sh", "-c",
		`cat /proc/sys/kernel/sem; ipct semget 0x1 6 create; ipct semget 0x1 5 create; ipct semget 0x2 5 create; ipct semget 0x3 5 create
ipct msgget 0x10 create >/dev/null
ipct msgget 0x11 create; ipct msgget 0x12 create; ipct msgget 0x13 create
ipct msgsnd 0x10 1 0123456789abcdef; ipct msgsnd 0x10 1 0123456789abcdefg; true`}
	b, _ = json.Marshal(spec)
	if err := os.WriteFile(dump, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.ctrLogged(t, []string{"run"}, []string{"--rm", "--config", dump, "--runtime", runtimeIPC, id}, nil)
	// semmsl 5, semmni 2; msgmni 3: the fourth queue is refused; msgmax 16.
	want(t, out, `^5\s+40\s+8\s+2\nERR EINVAL\n0\n1\nERR ENOSPC\n1\n2\nERR ENOSPC\nok\nERR EINVAL\n$`)
	want(t, e.log(t), `IPC namespace \d+: new engine namespace for container `+id+`, limits sem=5 40 8 2 msgmax=16 msgmnb=16384 msgmni=3`)
}

// A container joining the IPC namespace of a container served by another
// shim process shares its objects: its runc hands the listeners to the
// owner's shim. The owner outlives its own container while it serves the
// joiner, and the namespace is freed when both are gone.
func TestJoinAcrossShims(t *testing.T) {
	e := need(t)
	a, b := uniq(t, "xa"), uniq(t, "xb")
	apid := e.start(t, a, opts{})
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(apid)+"/ns/ipc", &st); err != nil {
		t.Fatal(err)
	}
	// The owner publishes the namespace: /run/containerd-shim-ipc/ns/<inode>.
	reg := "/run/containerd-shim-ipc/ns/" + strconv.FormatUint(st.Ino, 10)
	want(t, e.exec(t, a, `ipct semget 0x6161 2 create; ipct semop 0x6161 0 3`), `^0\nok \d+\n$`)
	if _, err := os.Readlink(reg); err != nil {
		t.Fatalf("namespace not published: %v", err)
	}
	e.start(t, b, opts{extra: []string{"--with-ns", "ipc:/proc/" + strconv.Itoa(apid) + "/ns/ipc"}})
	e.waitLog(t, `joins IPC namespace /proc/`+strconv.Itoa(apid)+`/ns/ipc, served by the shim listening on`)
	want(t, e.exec(t, b, `ipct getval 0x6161 0; ipct getpid 0x6161 0; ipct semop 0x6161 1 1 >/dev/null`), `^3\n0\n$`)
	e.wantKernelSets(t, apid, 0)
	want(t, e.exec(t, a, `ipct getval 0x6161 1`), `^1\n$`)
	// a's container goes first: b keeps the namespace, a's shim stays.
	e.stop(t, a)
	e.waitLog(t, `shutdown deferred: serving the IPC calls of 1 container`)
	want(t, e.exec(t, b, `ipct getval 0x6161 0; ipct semop 0x6161 0 -1`), `^3\nok \d+\n$`)
	// When b is gone the owner frees the namespace (unpublishes it) and
	// runs the deferred shutdown: its process exits. (containerd no
	// longer reads that shim's log by then.)
	e.stop(t, b)
	gone := func() bool {
		_, err := os.Lstat(reg)
		_, running := findShimPid(a)
		return os.IsNotExist(err) && !running
	}
	for i := 0; i < 100 && !gone(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if !gone() {
		t.Fatal("after the last container left, the owner shim did not free the namespace and exit")
	}
}

// Joining an IPC namespace that no ipc shim serves (a runc-shim
// container's: its objects are the kernel's) is refused.
func TestRefuseJoinKernelNamespace(t *testing.T) {
	e := need(t)
	a := uniq(t, "ka")
	apid := e.start(t, a, opts{runtime: runtimeRunc})
	id := uniq(t, "kb")
	args := opts{extra: []string{"--with-ns", "ipc:/proc/" + strconv.Itoa(apid) + "/ns/ipc"}}.runArgs(e, id)
	args = append([]string{args[0], "--rm"}, args[1:]...)
	out, err := e.ctrCmd(30*time.Second, append(args, "/bin/true")...)
	defer e.remove(id)
	if err == nil {
		t.Fatalf("container joining a kernel-served IPC namespace ran:\n%s", out)
	}
	want(t, out, `which no io.containerd.ipc.v2 shim serves.*run this one with io.containerd.runc.v2`)
}

// TestThreadChangesIPCNamespace: a thread that moved to a new IPC
// namespace (unshare -i) must no longer see its container's objects, even
// though the gateway caches each thread's namespace. With CAP_SYS_ADMIN and
// no profile the shim traps unshare and setns and lets them run; with
// containerd's default profile and no CAP_SYS_ADMIN they are refused, and
// nothing needs trapping. Both compared with runc's shim.
func TestThreadChangesIPCNamespace(t *testing.T) {
	e := need(t)
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
		log   string
	}{
		{"trapped", []string{"--cap-add", "CAP_SYS_ADMIN"}, `^0\nunshare ok\nERR ENOENT\n$`, `namespace changes: \[unshare setns\] trapped and let run; group changes: \[setgroups setgroups32\] trapped and let run`},
		{"refused", []string{"--seccomp"}, `^0\nunshare ERR EPERM\n0\n$`, `namespace changes: refused by the profile; group changes: \[setgroups setgroups32\] trapped and let run`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, rt := range []string{runtimeIPC, runtimeRunc} {
				id := uniq(t, "unshare")
				e.start(t, id, opts{runtime: rt, extra: tc.extra})
				got[i] = e.exec(t, id, `ipct semget 0x7171 1 create >/dev/null; ipct unshare 0x7171`)
			}
			want(t, got[0], tc.want)
			if got[0] != got[1] {
				t.Fatalf("this shim and runc's differ:\n ipc  %q\n runc %q", got[0], got[1])
			}
			e.waitLog(t, tc.log)
		})
	}
}
