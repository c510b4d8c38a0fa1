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
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS for pid %d", pid)
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
		var rss0 int64
		if rt == runtimeIPC {
			shim = shimPid(t, id)
			rss0 = rssKiB(t, shim)
		}
		execSeq++
		out, err := e.ctrCmd(120*time.Second, "task", "exec", "--exec-id", "fill"+strconv.Itoa(execSeq), id, "/bin/sh", "-c", fill)
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
		// What the shim holds for the messages is what the ballast
		// charges (text and the engine's record), so the shim's live
		// growth stays within the container's limit; its RSS also holds
		// garbage of the calls not yet collected (about 0.9 KB per
		// call: up to 8 MB for the ~7,400 calls here, measured 64-69 MB
		// of growth for 60 MB queued), which gcSlack allows for. The
		// race detector's shadow memory multiplies everything.
		const gcSlack = 16 << 20
		grew := (rssKiB(t, shim) - rss0) << 10
		t.Logf("shim RSS grew by %d bytes", grew)
		if grew > limit+gcSlack && os.Getenv("SHIM_RACE") == "" {
			t.Errorf("the shim grew by %d bytes for a container limited to %d", grew, limit)
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
