package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The in-container view (shim/sysvipcfs, shim/sysvipcfs/view): util-linux's
// ipcs, lsipc and ipcrm and the IPC sysctls inside a container under the
// shim must read exactly as under runc, where the kernel serves them.

// debianRootfs returns the Debian rootfs with util-linux and perl, or
// skips.
func debianRootfs(t *testing.T) string {
	t.Helper()
	rootfs := os.Getenv("DEBIAN_ROOTFS")
	if rootfs == "" {
		rootfs = filepath.Join(repoRoot(), "build", "debian-rootfs")
	}
	for _, b := range []string{"usr/bin/ipcs", "usr/bin/lsipc", "usr/bin/ipcrm", "usr/bin/perl", "sbin/sysctl"} {
		if _, err := os.Stat(filepath.Join(rootfs, b)); err != nil {
			missing(t, fmt.Sprintf("no Debian rootfs with %s: run scripts/make-debian-rootfs.sh", b))
		}
	}
	return rootfs
}

// runDebian runs script in a new container of runtime rt on the Debian
// rootfs, with integration/testdata at /t, and returns its output.
func (e *env) runDebian(t *testing.T, rt, rootfs, script string, extra ...string) string {
	t.Helper()
	td, _ := filepath.Abs("testdata")
	o := opts{runtime: rt, path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", rootfs: rootfs,
		extra: append([]string{"--mount", "type=bind,src=" + td + ",dst=/t,options=rbind:ro"}, extra...)}
	args := o.runArgs(e, uniq(t, "view"))
	// One stream: the shim copies stdout and stderr separately, in no
	// fixed order.
	return e.ctrLogged(t, args[:1], append(append([]string{"--rm"}, args[1:]...), "/bin/sh", "-c", "exec 2>&1\n"+script), nil)
}

// bothRuntimes runs script under runc's shim and this one and returns the
// two outputs, masked.
func (e *env) bothRuntimes(t *testing.T, script string, mask func(string) string, extra ...string) (runc, ipc string) {
	t.Helper()
	rootfs := debianRootfs(t)
	runc = e.runDebian(t, runtimeRunc, rootfs, script, extra...)
	ipc = e.runDebian(t, runtimeIPC, rootfs, script, extra...)
	t.Logf("%s:\n%s", runtimeRunc, runc)
	t.Logf("%s:\n%s", runtimeIPC, ipc)
	return mask(runc), mask(ipc)
}

var (
	epochRe = regexp.MustCompile(`\b1[0-9]{9}\b`)                                                                                                 // /proc/sysvipc times
	dateRe  = regexp.MustCompile(`(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d \d{4}`) // ipcs -i, -t
	hmsRe   = regexp.MustCompile(`\b\d\d:\d\d(:\d\d)?\b`)                                                                                         // lsipc, ipcs -t
	monRe   = regexp.MustCompile(`\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ?[ 0-9]?\d\b`)
)

// maskTimes replaces times (which legitimately differ between two runs).
func maskTimes(s string) string {
	s = dateRe.ReplaceAllString(s, "DATE")
	s = epochRe.ReplaceAllString(s, "EPOCH")
	s = hmsRe.ReplaceAllString(s, "HH:MM")
	return monRe.ReplaceAllString(s, "MON")
}

// diffLines reports the first differing lines of a and b.
func diffLines(t *testing.T, what, a, b string) {
	t.Helper()
	if a == b {
		return
	}
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var d []string
	for i := 0; i < max(len(al), len(bl)) && len(d) < 20; i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			d = append(d, fmt.Sprintf("line %d:\n  runc: %q\n  ipc:  %q", i+1, x, y))
		}
	}
	t.Errorf("%s differs from runc's:\n%s", what, strings.Join(d, "\n"))
}

// pidsFrom100 makes the container's next pids 100, 101, ...: pids are
// compared (sempid, lspid), and how many runc's setup consumed varies. Each
// turn forks exactly one process.
const pidsFrom100 = `while :; do /bin/true & n=$!; wait; [ $n -ge 99 ] && break; done
`

const viewObjects = pidsFrom100 + `p="perl /t/view.pl"
$p semget 0x1234 3 0640; $p semget 0x1235 1 0600; $p semget private 2 0666
$p setall 0 1 2 3; $p semop 0 1 -1
$p msgget 0x2345 0640; $p msgget 0x2346 0600
$p msgsnd 0 1 100; $p msgsnd 0 2 50; $p msgsnd 1 7 3000
`

// TestViewIpcs compares ipcs, lsipc, ipcrm and /proc/sysvipc inside a
// container under both shims.
func TestViewIpcs(t *testing.T) {
	e := need(t)
	script := viewObjects + `
echo "== mounted"; grep -cE ' /proc/(sysvipc|sys/kernel/(sem|msgmax|msgmnb|msgmni|sem_next_id|msg_next_id)) ' /proc/self/mountinfo
echo "== /proc/sysvipc/sem"; cat /proc/sysvipc/sem
echo "== /proc/sysvipc/msg"; cat /proc/sysvipc/msg
echo "== /proc/sysvipc/shm"; cat /proc/sysvipc/shm
# The size column is left out: procfs says 0, the view the content's length
# (FUSE serves sendfile only up to the size).
echo "== ls"; ls -ld /proc/sysvipc /proc/sysvipc/* /proc/sys/kernel/sem /proc/sys/kernel/msg* /proc/sys/kernel/sem_next_id | awk '{print $1, $2, $3, $4, $NF}'
echo "== busybox-style sendfile"; for f in /proc/sysvipc/sem /proc/sys/kernel/sem; do [ -x /bin/busybox ] && /bin/busybox cat $f | head -2; done
echo "== ipcs"; ipcs
echo "== ipcs -s"; ipcs -s
echo "== ipcs -q"; ipcs -q
echo "== ipcs -u"; ipcs -u
echo "== ipcs -l"; ipcs -l
echo "== ipcs -s -i 0"; ipcs -s -i 0
echo "== ipcs -q -i 1"; ipcs -q -i 1
echo "== ipcs -p"; ipcs -q -p
echo "== ipcs -c"; ipcs -s -q -c
echo "== ipcs -t"; ipcs -s -q -t
echo "== lsipc"; lsipc
echo "== lsipc -s"; lsipc -s
echo "== lsipc -q"; lsipc -q
echo "== lsipc -s -i 0"; lsipc -s -i 0
echo "== lsipc -g"; lsipc -g
echo "== ipcrm -s 0 -Q 0x2346"; ipcrm -s 0 -Q 0x2346; echo rc=$?
ipcs -s -q
echo "== ipcrm -a"; ipcrm -a; echo rc=$?
ipcs -s -q; cat /proc/sysvipc/sem /proc/sysvipc/msg
`
	runc, ipc := e.bothRuntimes(t, script, maskTimes)
	if !strings.Contains(runc, "== mounted\n0\n") || !strings.Contains(ipc, "== mounted\n7\n") {
		t.Errorf("want no view mount under %s and 7 (/proc/sysvipc and 6 sysctls) under %s", runtimeRunc, runtimeIPC)
	}
	ipc = strings.Replace(ipc, "== mounted\n7\n", "== mounted\n0\n", 1)
	diffLines(t, "the tools' output", runc, ipc)
}

const sysctls = "kernel.sem kernel.msgmax kernel.msgmnb kernel.msgmni kernel.sem_next_id kernel.msg_next_id"

// TestViewSysctlWrites writes the IPC sysctls in a privileged container
// and checks, against runc, that the engine enforces what /proc/sys
// reads: kernel.sem (semmsl, semmns, semopm, semmni), msgmax, msgmnb,
// msgmni, refused values, and sem_next_id/msg_next_id consumed once.
func TestViewSysctlWrites(t *testing.T) {
	e := need(t)
	script := pidsFrom100 + `p="perl /t/view.pl"
echo "== defaults"; sysctl ` + sysctls + `
echo "== next_id"
echo 77 > /proc/sys/kernel/sem_next_id; echo 1234 > /proc/sys/kernel/msg_next_id; sysctl kernel.sem_next_id kernel.msg_next_id
$p semget private 1 0600; cat /proc/sys/kernel/sem_next_id; $p semget private 1 0600
$p msgget private 0600; cat /proc/sys/kernel/msg_next_id; $p msgget private 0600
ipcs -s -q | sed 's/^0x00000000 //'
ipcrm -a
echo "== next_id taken"; echo 5 > /proc/sys/kernel/sem_next_id; $p semget 0x55 1 0600; $p semget 0x55 1 0600; cat /proc/sys/kernel/sem_next_id; ipcrm -a
echo "== limits"
sysctl -w kernel.sem="4 10 5 3" kernel.msgmax=100 kernel.msgmnb=300 kernel.msgmni=2
sysctl ` + sysctls + `
cat /proc/sys/kernel/sem
$p semget private 5 0600; $p semget private 4 0600; $p semget private 4 0600
$p semget private 3 0600; $p semget private 2 0600; $p semget private 1 0600
$p semopn 0 5; $p semopn 0 6
$p msgget private 0600; $p msgget private 0600; $p msgget private 0600
$p msgsnd 0 1 101; $p msgsnd 0 1 100; $p msgsnd 0 1 100; $p msgsnd 0 1 100; $p msgsnd 0 1 1
ipcs -l; ipcs -u; ipcs -q -i 0; lsipc
echo "== refused"
sysctl -w kernel.sem="1 2 3 40000"; sysctl -w kernel.msgmni=40000; sysctl -w kernel.msgmax=-1
sysctl -w kernel.sem="1 2"; echo -1 > /proc/sys/kernel/sem_next_id; echo x > /proc/sys/kernel/msg_next_id
echo foo > /proc/sys/kernel/msgmax; echo rc=$?
sysctl ` + sysctls + `
echo "== raised"; sysctl -w kernel.sem="250 32000 32 128" kernel.msgmni=16
$p semget private 1 0600; $p msgget private 0600; ipcs -u
`
	runc, ipc := e.bothRuntimes(t, script, maskTimes, "--privileged")
	diffLines(t, "the sysctl and enforcement transcript", runc, ipc)
}

// TestViewSysctlReadOnly: an unprivileged container's /proc/sys is
// read-only under both shims, the view's files included.
func TestViewSysctlReadOnly(t *testing.T) {
	e := need(t)
	script := `for f in sem msgmax msgmnb msgmni sem_next_id msg_next_id; do
  (echo 1 > /proc/sys/kernel/$f) 2>&1 | sed 's/^.*: //'; done
sysctl ` + sysctls + `; ipcs -l`
	runc, ipc := e.bothRuntimes(t, script, maskTimes)
	diffLines(t, "the read-only /proc/sys transcript", runc, ipc)
}

// TestViewRobust: the view's server ends with the container; a reader of
// a view whose shim died gets an error at once, not a hang.
func TestViewRobust(t *testing.T) {
	e := need(t)
	id := uniq(t, "viewgone")
	e.start(t, id, opts{})
	e.remove(id)
	e.waitLog(t, `container `+id+`: /proc/sysvipc view stopped`)

	id = uniq(t, "viewkill")
	pid := e.start(t, id, opts{})
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	ppid := regexp.MustCompile(`(?m)^PPid:\s+(\d+)`).FindSubmatch(st)
	if ppid == nil {
		t.Fatal("no PPid")
	}
	comm, _ := os.ReadFile("/proc/" + string(ppid[1]) + "/comm")
	if !strings.HasPrefix(string(comm), "containerd-shim") {
		t.Skipf("init's parent is %q, not the shim", comm)
	}
	path := fmt.Sprintf("/proc/%d/root/proc/sysvipc/sem", pid)
	if _, err := os.ReadFile(path); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	p, _ := os.FindProcess(atoi(string(ppid[1])))
	p.Signal(syscall.SIGKILL)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 50; i++ {
			if _, err := os.ReadFile(path); err != nil {
				done <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the view still answered 1s after its shim was killed")
		}
		t.Logf("after the shim's death: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a read of the view hangs after its shim was killed")
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(strings.TrimSpace(s)); return n }

// TestViewCost measures the view (VIEW_BENCH=1; figures in
// docs/bench-view.md): an open+read+close of /proc/sysvipc/sem with 10
// and 1000 sets and of /proc/sys/kernel/sem, under runc (the kernel's
// files) and this shim (the view); and a trapped semop loop with the view
// off (annotation io.containerd.ipc.v2.procview=false) and on, each alone
// and with a reader looping on /proc/sysvipc/sem beside it (the kernel's
// empty file with the view off: the control for the CPU the loop takes).
func TestViewCost(t *testing.T) {
	if os.Getenv("VIEW_BENCH") == "" {
		t.Skip("set VIEW_BENCH=1 to measure the view's cost")
	}
	e := need(t)
	rootfs := debianRootfs(t)
	reads := `mk() { perl -MIPC::SysV=IPC_PRIVATE,IPC_CREAT -e 'semget(IPC_PRIVATE, 1, IPC_CREAT|0600) for 1..$ARGV[0]' $1; }
rd() { perl -MTime::HiRes=time -e '$n = shift; $t = time; for (1..$n) { open(my $f, "<", $ARGV[0]) or die "$ARGV[0]: $!"; local $/; my $x = <$f>; close $f } printf "%s %.1f us/read\n", $ARGV[0], (time - $t) / $n * 1e6' $1 $2; }
mk 10; rd 3000 /proc/sysvipc/sem; rd 3000 /proc/sys/kernel/sem; rd 3000 /proc/sysvipc/msg
mk 990; rd 300 /proc/sysvipc/sem
`
	for _, rt := range []string{runtimeRunc, runtimeIPC} {
		out := e.runDebian(t, rt, rootfs, reads)
		t.Logf("%s reads:\n%s", rt, out)
	}
	semop := `perl -MIPC::SysV=IPC_PRIVATE,IPC_CREAT -MTime::HiRes=time -e '
$id = semget(IPC_PRIVATE, 1, IPC_CREAT|0600); $up = pack("s!3", 0, 1, 0); $dn = pack("s!3", 0, -1, 0);
$n = 20000; $t = time; for (1..$n) { semop($id, $up) or die; semop($id, $dn) or die }
printf "semop %.2f us/op\n", (time - $t) / (2 * $n) * 1e6'
`
	for i := 0; i < 3; i++ {
		for _, c := range []struct {
			name, script string
			extra        []string
		}{
			{"view off", semop, []string{"--annotation", "io.containerd.ipc.v2.procview=false"}},
			{"view on", semop, nil},
			{"view off, reader beside", "(while :; do cat /proc/sysvipc/sem >/dev/null; done) & r=$!\n" + semop + "kill $r", []string{"--annotation", "io.containerd.ipc.v2.procview=false"}},
			{"view on, reader beside", "(while :; do cat /proc/sysvipc/sem >/dev/null; done) & r=$!\n" + semop + "kill $r", nil},
		} {
			out := e.runDebian(t, runtimeIPC, rootfs, c.script, c.extra...)
			t.Logf("%s: %s", c.name, strings.TrimSpace(out))
		}
	}
}

// TestViewSysctlHostWrite: a value written behind the container's back (a
// host process in the container's IPC namespace only) is what the
// container reads next, and from then on what the engine enforces.
func TestViewSysctlHostWrite(t *testing.T) {
	e := need(t)
	rootfs := debianRootfs(t)
	td, _ := filepath.Abs("testdata")
	id := uniq(t, "viewhost")
	o := opts{path: "/usr/bin:/bin:/usr/sbin:/sbin", rootfs: rootfs, extra: []string{"--mount", "type=bind,src=" + td + ",dst=/t,options=rbind:ro"}}
	pid := e.start(t, id, o)
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "--ipc", "sh", "-c", "echo 2 > /proc/sys/kernel/msgmni").CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	out := e.exec(t, id, `exec 2>&1; cat /proc/sys/kernel/msgmni; p="perl /t/view.pl"; $p msgget private 0600; $p msgget private 0600; $p msgget private 0600`)
	want(t, out, `^2\nok 0 pid=\d+\nok 1 pid=\d+\nerr 28 `)
}
