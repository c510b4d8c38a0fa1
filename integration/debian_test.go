package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestDebianWorkloads runs real System V IPC users in a Debian rootfs
// (scripts/make-debian-rootfs.sh) under runc's shim and under this one:
// stress-ng's sem-sysv (and msg) stressors with --verify, perl IPC::SysV,
// python3-sysv-ipc, and apache2 with its accept mutex on SysV semaphores.
func TestDebianWorkloads(t *testing.T) {
	e := need(t)
	rootfs := os.Getenv("DEBIAN_ROOTFS")
	if rootfs == "" {
		rootfs = filepath.Join(repoRoot(), "build", "debian-rootfs")
	}
	if _, err := os.Stat(filepath.Join(rootfs, "usr", "bin", "stress-ng")); err != nil {
		missing(t, "no Debian rootfs with stress-ng: run scripts/make-debian-rootfs.sh")
	}
	td, _ := filepath.Abs("testdata")
	// The stressors are bounded by operations, not time: at a time
	// bound stress-ng ends them with SIGALRM, whose handler lacks
	// SA_RESTART, and a call that does not sleep natively but is waiting
	// for the shim at that instant (a few µs of each call) returns EINTR
	// ("msgctl MSG_INFO failed, errno=4", about 1 run in 30 on a loaded
	// machine): the inexactness shim/gateway/doc.go states, which runc
	// 1.1.5 cannot avoid (it cannot set
	// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV). -t only guards a hang: on
	// a loaded machine (load 17) the 20,000 msg operations took 27 s
	// under the shim, and -t 25 stopped them short (a failure of this
	// test, not of the shim). The script has 6 minutes.
	script := `
stress-ng --sem-sysv 2 --sem-sysv-ops 10000 --verify -t 150 --metrics-brief 2>&1 | grep -E "sem-sysv +[0-9]|successful|fail|error" | sed 's/^stress-ng: [a-z]*: *\[[0-9]*\] //'
stress-ng --msg 2 --msg-ops 20000 --verify -t 150 --metrics-brief 2>&1 | grep -E "msg +[0-9]|successful|fail|error|Function not implemented" | sed 's/^stress-ng: [a-z]*: *\[[0-9]*\] //'
perl /t/sysv.pl; python3 /t/sysv.py; sh /t/apache.sh keep`
	res := map[string]string{}
	for _, rt := range []string{runtimeRunc, runtimeIPC} {
		t.Run(rt, func(t *testing.T) {
			o := opts{runtime: rt, path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", rootfs: rootfs,
				extra: []string{"--mount", "type=bind,src=" + td + ",dst=/t,options=rbind:ro"}}
			id := uniq(t, "deb")
			pid := e.start(t, id, o)
			out := e.execFor(t, id, script, 6*time.Minute)
			// apache is still running: its accept mutex is a SysV set,
			// in the kernel under runc's shim, in the engine under ours.
			ks := e.kernelSets(t, pid)
			t.Logf("%s:\n%s", rt, out)
			res[rt] = out
			// All the operations ran: a stressor stopped by -t (SIGALRM)
			// is the time-bounded run the bound replaced.
			want(t, out, `sem-sysv +([1-9]\d{4,}) `)
			want(t, out, `msg +([2-9]\d{4}|[1-9]\d{5,}) `)
			want(t, out, `successful run completed`)
			if regexp.MustCompile(`(?i)\bfail|error|not implemented|ENOSYS`).MatchString(out) {
				t.Fatalf("a workload failed:\n%s", out)
			}
			want(t, out, `perl-sem ok value=0\n`)
			want(t, out, `python-sem ok value=0\n`)
			want(t, out, `apache-requests ok=200/200`)
			t.Logf("with apache running: %s", ks)
			if rt == runtimeIPC {
				if ks != "kernel-sets=0" {
					t.Fatalf("%s under the ipc shim", ks)
				}
			} else if ks == "kernel-sets=0" {
				t.Fatal("apache made no SysV semaphore set under runc's shim: the test proves nothing")
			}
			want(t, out, `perl-msg ok pong:ping`)
			want(t, out, `python-msg ok pong:ping`)
		})
	}
}
