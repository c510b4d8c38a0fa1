package integration

import (
	"strings"
	"testing"
)

// TestUserNamespace runs a container in its own user namespace (container
// root is host uid 100000) under both shims: the calls work, and the
// owner and creator ids that /proc/sysvipc/sem shows inside are the
// container's own (0), as the kernel shows them through the reader's user
// namespace; under this shim the gateway maps the caller's ids through
// the container's uid_map and gid_map.
func TestUserNamespace(t *testing.T) {
	e := need(t)
	userns := []string{"--uidmap", "0:100000:65536", "--gidmap", "0:100000:65536"}
	// The semop is undone when its ipct process exits: getval reads 5.
	script := `ipct semget 0x6161 2 create >/dev/null; ipct setval 0x6161 1 5; ipct semop 0x6161 1 -2 undo | cut -d' ' -f1; ipct getval 0x6161 1; ` +
		`tail -n +2 /proc/sysvipc/sem | awk '{print $1, $3, $4, $5, $6, $7, $8}'`
	var got [2]string
	for i, rt := range []string{runtimeIPC, runtimeRunc} {
		id := uniq(t, "userns")
		e.start(t, id, opts{runtime: rt, extra: userns})
		got[i] = e.exec(t, id, script)
		t.Logf("%s:\n%s", rt, got[i])
	}
	want(t, got[0], `^ok\nok\n5\n24929 666 2 0 0 0 0\n$`)
	if got[0] != got[1] {
		t.Fatalf("this shim and runc's differ:\n ipc  %q\n runc %q", got[0], got[1])
	}
	if strings.Contains(got[0], "100000") {
		t.Fatal("host ids leaked into the container")
	}
}
