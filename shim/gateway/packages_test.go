package gateway_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestPackagesDifferential runs programs built on the System V calls by
// others (Debian's perl IPC::SysV and IPC::Msg, python3-sysv-ipc, php-cli
// sysvsem and sysvmsg)
// natively in a fresh IPC namespace and under the gateway: outputs must
// be identical. scripts/install-deps.sh installs them; missing ones skip.
func TestPackagesDifferential(t *testing.T) {
	for _, c := range []struct{ name, interp, script, check string }{
		{"perl", "perl", "testdata/semtest.pl", ""},
		{"python3-sysv-ipc", "/usr/bin/python3", "testdata/semtest.py", "import sysv_ipc"},
		{"php-sysvsem", "php", "testdata/semtest.php", ""},
		{"perl-msg", "perl", "testdata/msgtest.pl", ""},
		{"python3-sysv-ipc-msg", "/usr/bin/python3", "testdata/msgtest.py", "import sysv_ipc"},
		{"php-sysvmsg", "php", "testdata/msgtest.php", "exit(function_exists('msg_get_queue') ? 0 : 1);"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.interp); err != nil {
				t.Skipf("%s not installed", c.interp)
			}
			if c.check != "" {
				flag := "-c"
				if c.interp == "php" {
					flag = "-r"
				}
				if err := exec.Command(c.interp, flag, c.check).Run(); err != nil {
					t.Skipf("%s: %v", c.check, err)
				}
			}
			native, err := harness.NativeCommand(c.interp, c.script).Output()
			if err != nil {
				t.Skipf("native run: %v\n%s", err, native)
			}
			trapped := serve(t, harness.NewEnginesByInode(), c.interp, c.script)
			diff(t, native, trapped)
		})
	}
}

// TestStressNG runs stress-ng's sem-sysv and msg stressors with --verify
// natively and under the gateway: both must complete successfully.
func TestStressNG(t *testing.T) {
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Skip("stress-ng not installed")
	}
	ops := "20000"
	if testing.Short() {
		ops = "3000"
	}
	for _, stressor := range []string{"sem-sysv", "msg"} {
		t.Run(stressor, func(t *testing.T) {
			argv := []string{"stress-ng", "--" + stressor, "2", "--" + stressor + "-ops", ops, "--verify", "-t", "60"}
			nout, err := harness.NativeCommand(argv...).Output()
			if err != nil {
				t.Skipf("native stress-ng: %v\n%s", err, nout)
			}
			// serve fails the test on a non-zero exit; stress-ng
			// reports to stderr, which serve passes through.
			tout, g := serveWith(t, harness.NewEnginesByInode(), nil, argv...)
			logStats(t, g)
			if strings.Contains(string(tout), "fail") {
				t.Fatalf("stress-ng: %s", tout)
			}
		})
	}
}
