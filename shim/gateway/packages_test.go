package gateway_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// TestPackagesDifferential runs programs built on the System V calls by
// others (Debian's perl IPC::SysV, python3-sysv-ipc, php-cli sysvsem)
// natively in a fresh IPC namespace and under the gateway: outputs must
// be identical. scripts/install-deps.sh installs them; missing ones skip.
func TestPackagesDifferential(t *testing.T) {
	for _, c := range []struct{ name, interp, script, check string }{
		{"perl", "perl", "testdata/semtest.pl", ""},
		{"python3-sysv-ipc", "/usr/bin/python3", "testdata/semtest.py", "import sysv_ipc"},
		{"php-sysvsem", "php", "testdata/semtest.php", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.interp); err != nil {
				t.Skipf("%s not installed", c.interp)
			}
			if c.check != "" {
				if err := exec.Command(c.interp, "-c", c.check).Run(); err != nil {
					t.Skipf("%s: %v", c.check, err)
				}
			}
			native, err := harness.NativeCommand(c.interp, c.script).Output()
			if err != nil {
				t.Skipf("native run: %v\n%s", err, native)
			}
			trapped := serve(t, gateway.NewEngines(), c.interp, c.script)
			diff(t, native, trapped)
		})
	}
}

// TestStressNG runs stress-ng's sem-sysv stressor with --verify natively
// and under the gateway: both must complete successfully.
func TestStressNG(t *testing.T) {
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Skip("stress-ng not installed")
	}
	ops := "20000"
	if testing.Short() {
		ops = "3000"
	}
	argv := []string{"stress-ng", "--sem-sysv", "2", "--sem-sysv-ops", ops, "--verify", "-t", "60"}
	ncmd := harness.NativeCommand(argv...)
	nout, err := ncmd.Output()
	if err != nil {
		t.Skipf("native stress-ng: %v\n%s", err, nout)
	}
	cmd := argv
	tout := serve(t, gateway.NewEngines(), cmd...)
	_ = tout
	// serve fails the test on a non-zero exit; stress-ng reports to
	// stderr, which serve passes through.
	if strings.Contains(string(tout), "fail") {
		t.Fatalf("stress-ng: %s", tout)
	}
}
