package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
)

// rssKiB returns process pid's resident set (VmRSS) in KiB.
func rssKiB(t *testing.T, pid int) int64 { return statusKiB(t, pid, "VmRSS") }

// statusKiB returns a field of /proc/pid/status in KiB: VmRSS, RssAnon
// (the process's own memory), RssShmem (pages of files it maps).
func statusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s for pid %d", field, pid)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// cgroupUsage returns the memory cgroup usage of process pid's cgroup
// and the cgroup's directory.
func cgroupUsage(t *testing.T, pid int) (int64, string) {
	t.Helper()
	procs, err := memcharge.MemoryCgroup(pid)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(procs)
	for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n, dir
		}
	}
	t.Fatalf("no memory usage file in %s", dir)
	return 0, ""
}

var stoppedRe = regexp.MustCompile(`(?m)^stopped (\d+) (.*)$|^queued (\d+)$`)

// queued returns the bytes ipct fill reported queued last, and how it
// stopped ("" if it was killed first).
func queued(out string) (int64, string) {
	var n int64
	how := ""
	for _, m := range stoppedRe.FindAllStringSubmatch(out, -1) {
		if m[1] != "" {
			n, _ = strconv.ParseInt(m[1], 10, 64)
			how = m[2]
		} else {
			n, _ = strconv.ParseInt(m[3], 10, 64)
		}
	}
	return n, how
}

// A container limited to 64 MiB that queues messages until it cannot is
// stopped within its own limit under both runtimes: under runc the
// kernel charges msg_msg to its memory cgroup; under the shim the
// engine's bytes are charged there too (shim/memcharge), so the pod's
// OOM killer or ENOMEM stops it, the shim grows by no more than the
// container's limit, and another container's calls and containerd's
// calls to the shim go on.
func TestMemoryChargedToContainer(t *testing.T) {
	e := need(t)
	const limit = 64 << 20
	fill := "ipct fill 8192 536870912; echo exit=$?"
	results := map[string]int64{}
	for _, rt := range []string{runtimeRunc, runtimeIPC} {
		id := uniq(t, "memfill-"+strings.Split(rt, ".")[2])
		pid := e.start(t, id, opts{runtime: rt, extra: []string{"--memory-limit", strconv.Itoa(limit)}})
		var shim int
		var rss0, anon0, shmem0 int64
		if rt == runtimeIPC {
			shim = shimPid(t, id)
			rss0 = rssKiB(t, shim)
			anon0, shmem0 = statusKiB(t, shim, "RssAnon"), statusKiB(t, shim, "RssShmem")
		}
		execSeq++
		xid := "fill" + strconv.Itoa(execSeq)
		out, err := e.ctrLoggedErr(t, 120*time.Second, []string{"task", "exec"}, []string{"--exec-id", xid, id, "/bin/sh", "-c", fill}, func() {
			e.execDeleted(t, id, xid)
		})
		n, how := queued(out)
		usage, dir := cgroupUsage(t, pid)
		t.Logf("%s: queued %d bytes, stopped by %q (exec: %v), cgroup usage %d bytes", rt, n, how, err, usage)
		results[rt] = n
		if n == 0 || n > limit {
			t.Errorf("%s: queued %d bytes in a container limited to %d", rt, n, limit)
		}
		if how != "" && how != "ERR ENOMEM" {
			t.Errorf("%s: fill stopped by %q, want ENOMEM or the OOM killer", rt, how)
		}
		if rt != runtimeIPC {
			e.stop(t, id)
			continue
		}
		if usage < n {
			t.Errorf("the container's memory cgroup holds %d bytes, less than the %d it queued", usage, n)
		}
		// The messages' text is in pages the pod was charged for,
		// mapped into the shim (RssShmem: memcharge's arena), so the
		// host holds it once; the shim's own memory (RssAnon) grows only
		// by the engine's records (tens of bytes a message, charged to
		// the pod too) and garbage of the calls not yet collected
		// (about 0.9 KB per call: up to 8 MB for the ~7,400 calls
		// here), which gcSlack allows for. The race detector's shadow
		// memory multiplies everything.
		const gcSlack = 16 << 20
		grew := (rssKiB(t, shim) - rss0) << 10
		anon := (statusKiB(t, shim, "RssAnon") - anon0) << 10
		shmem := (statusKiB(t, shim, "RssShmem") - shmem0) << 10
		t.Logf("shim RSS grew by %d bytes: %d anonymous, %d of the pod's text pages", grew, anon, shmem)
		if os.Getenv("SHIM_RACE") == "" {
			if grew > limit+gcSlack {
				t.Errorf("the shim grew by %d bytes for a container limited to %d", grew, limit)
			}
			if anon > n/8+gcSlack {
				t.Errorf("the shim's own memory grew by %d bytes for %d bytes queued: message text is not in the pod's pages", anon, n)
			}
		}
		// Another container of the same shim binary, and containerd's
		// calls to this one, go on.
		other := uniq(t, "memother")
		out = e.run(t, other, "ipct semget 0x51 1 create >/dev/null; ipct semop 0x51 0 1; ipct getval 0x51 0", opts{})
		want(t, out, `(?s)ok \d+\n1\n$`)
		e.stop(t, id)
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("the container's cgroup %s is still there after its delete", dir)
		}
	}
	t.Logf("queued before being stopped: runc %d, shim %d (limit %d)", results[runtimeRunc], results[runtimeIPC], limit)
}

// A CRI pod whose cgroup (cgroup_parent, as kubelet sets it) is limited
// to 64 MiB: a container queueing messages is stopped within the pod's
// limit; the ballast's helper sits in the sandbox's cgroup, inside the
// pod's, and leaves it when the pod is removed.
func TestCRIPodMemoryCharged(t *testing.T) {
	e := need(t)
	procs, err := memcharge.MemoryCgroup(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	// A pod cgroup beside the test's, as kubelet's cgroupfs driver makes
	// /kubepods/pod<uid>: the memory hierarchy's root is the mount point.
	root := filepath.Dir(procs)
	for _, err := os.Stat(filepath.Join(root, "..", "cgroup.procs")); err == nil && filepath.Dir(root) != root; _, err = os.Stat(filepath.Join(root, "..", "cgroup.procs")) {
		root = filepath.Dir(root)
	}
	parentName := uniq(t, "ipcpod")
	parent := filepath.Join(root, parentName)
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("make a pod cgroup: %v", err)
	}
	t.Cleanup(func() {
		// runc leaves the pod's cgroup in every hierarchy (kubelet
		// removes it): remove them all.
		dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(root), "*", parentName))
		for _, d := range append(dirs, parent) {
			os.Remove(d)
		}
	})
	const limit = 64 << 20
	limitFile, usageFile := "memory.max", "memory.current"
	if _, err := os.Stat(filepath.Join(parent, "memory.limit_in_bytes")); err == nil {
		limitFile, usageFile = "memory.limit_in_bytes", "memory.usage_in_bytes"
	}
	if err := os.WriteFile(filepath.Join(parent, limitFile), []byte(strconv.Itoa(limit)), 0); err != nil {
		t.Skipf("limit the pod cgroup: %v", err)
	}
	criImage(t, e)
	dir := t.TempDir()
	write := func(name, s string) string { return writeFile(t, dir, name, s) }
	uid := uniq(t, "m")
	pod := write("pod.json", `{"metadata":{"name":"mempod","namespace":"default","uid":"`+uid+`"},"log_directory":"`+dir+`",
 "linux":{"cgroup_parent":"/`+parentName+`","security_context":{"namespace_options":{"network":2,"pid":1,"ipc":0}}}}`)
	ctr := write("c.json", `{"metadata":{"name":"filler"},"image":{"image":"localhost/ipct:1"},"command":["/bin/sleep","100000"],"log_path":"c.log",
 "linux":{"security_context":{"namespace_options":{"network":2,"pid":1,"ipc":0}}}}`)
	podID := strings.TrimSpace(e.crictl(t, "runp", "--runtime", "ipc", pod))
	removed := false
	t.Cleanup(func() {
		if !removed {
			e.crictl(t, "stopp", podID)
			e.crictl(t, "rmp", podID)
		}
	})
	cid := strings.TrimSpace(e.crictl(t, "create", podID, ctr, pod))
	e.crictl(t, "start", cid)
	// A first message starts the helper: in the sandbox's cgroup, under
	// the pod's. (Later, at the limit, the pod's OOM killer may take it:
	// without CAP_SYS_RESOURCE the shim cannot make it unkillable.)
	want(t, e.crictl(t, "exec", "-s", cid, "/bin/sh", "-c", "ipct msgget 0x5 create >/dev/null; ipct msgsnd 0x5 1 hello"), `^ok\n`)
	helpers := 0
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), memcharge.HelperArg) {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		if strings.Contains(string(cg), "/"+parentName+"/") {
			helpers++
			pid, _ := strconv.Atoi(ent.Name())
			st, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
			anon := regexp.MustCompile(`RssAnon:\s+(\d+) kB`).FindSubmatch(st)
			if anon != nil {
				t.Logf("helper %d: RSS %d KiB, of which %s KiB anonymous (charged to the pod)", pid, rssKiB(t, pid), anon[1])
			}
			if !strings.Contains(string(cg), podID) {
				t.Errorf("helper %s is not in the sandbox's cgroup:\n%s", ent.Name(), cg)
			}
		}
	}
	if helpers != 1 {
		t.Errorf("%d helpers in the pod's cgroup, want 1", helpers)
	}
	out, _ := e.crictlErr("exec", "-s", cid, "/bin/sh", "-c", "ipct fill 8192 536870912; echo exit=$?")
	n, how := queued(out)
	usage, _ := os.ReadFile(filepath.Join(parent, usageFile))
	t.Logf("pod: queued %d bytes, stopped by %q, pod cgroup usage %s", n, how, strings.TrimSpace(string(usage)))
	if n == 0 || n > limit {
		t.Errorf("queued %d bytes in a pod limited to %d", n, limit)
	}
	if how != "" && how != "ERR ENOMEM" {
		t.Errorf("fill stopped by %q, want ENOMEM or the OOM killer", how)
	}
	if u, _ := strconv.ParseInt(strings.TrimSpace(string(usage)), 10, 64); u < n {
		t.Errorf("the pod's cgroup holds %d bytes, less than the %d it queued", u, n)
	}
	e.crictl(t, "stopp", podID)
	e.crictl(t, "rmp", podID)
	removed = true
	// Everything under the pod's cgroup is gone with the pod: the helper
	// did not keep the sandbox's cgroup alive.
	left, _ := os.ReadDir(parent)
	for _, l := range left {
		if l.IsDir() {
			t.Errorf("cgroup %s left under the pod's after rmp", l.Name())
		}
	}
}

// One container hammering its memory limit (queues filled until ENOMEM or
// its OOM killer, emptied, filled again) does not disturb another: the
// other's semops all succeed (their time per pair is logged against a
// quiet run, no timing is asserted), containerd's exec into it works,
// and killing the hammering container works.
func TestHammerLimitIsolation(t *testing.T) {
	e := need(t)
	// The hammer under runc first: what the same load costs the calm
	// container when the kernel serves it (both compete for 2 CPUs).
	for _, rt := range []string{runtimeRunc, runtimeIPC} {
		hammerLimit(t, e, rt)
	}
}

func hammerLimit(t *testing.T, e *env, rt string) {
	const limit = 64 << 20
	hammer := uniq(t, "hammer")
	pid := e.start(t, hammer, opts{runtime: rt, extra: []string{"--memory-limit", strconv.Itoa(limit)}})
	calm := uniq(t, "calm")
	e.start(t, calm, opts{})
	pairs := func() int64 {
		out := e.exec(t, calm, "ipct semget 0x60 1 create >/dev/null; ipct setval 0x60 0 1 >/dev/null; ipct semloop 0x60 20000")
		ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("semloop: %q", out)
		}
		return ns
	}
	quiet := pairs()
	e.execDetached(t, hammer, "while :; do ipct fill 8192 536870912 >/dev/null; ipct rmall >/dev/null; done")
	// Wait until the hammer has reached its limit once.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if u, _ := cgroupUsage(t, pid); u > limit*3/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hammering container never neared its limit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	busy := pairs()
	want(t, e.exec(t, calm, "ipct semget 0x61 1 create >/dev/null; ipct semop 0x61 0 1"), `^ok \d+\n$`)
	t.Logf("calm container's semop pair: %d ns quiet, %d ns while one under %s hammers its limit (%.2fx)", quiet, busy, rt, float64(busy)/float64(quiet))
	e.stop(t, hammer)
}
