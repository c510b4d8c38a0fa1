package memcharge

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MemoryCgroup returns the cgroup.procs file of the memory cgroup of
// process pid, as seen from the shim's cgroup namespace: the v1 "memory"
// hierarchy if one is mounted, else the unified (v2) hierarchy. Writing a
// pid there makes that process's new pages the cgroup's.
func MemoryCgroup(pid int) (string, error) {
	return memoryCgroup("/proc/"+strconv.Itoa(pid)+"/cgroup", "/proc/self/mountinfo")
}

func memoryCgroup(cgroupFile, mountinfo string) (string, error) {
	mounts, err := cgroupMounts(mountinfo)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(cgroupFile)
	if err != nil {
		return "", err
	}
	var v1, v2 string
	haveV1, haveV2 := false, false
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controller-list:cgroup-path (man 7 cgroups)
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, haveV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1, haveV1 = parts[2], true
			}
		}
	}
	switch {
	case haveV1 && mounts.v1Memory != nil:
		return mounts.v1Memory.procs(v1)
	case haveV2 && mounts.v2 != nil:
		return mounts.v2.procs(v2)
	}
	return "", fmt.Errorf("%s: no memory cgroup the shim can see", cgroupFile)
}

// cgroupMount is a mounted cgroup hierarchy: its mount point and the
// cgroup path mounted there.
type cgroupMount struct{ dir, root string }

func (m *cgroupMount) procs(path string) (string, error) {
	rel := path
	if m.root != "/" {
		if path != m.root && !strings.HasPrefix(path, m.root+"/") {
			return "", fmt.Errorf("cgroup %s is outside the mounted %s", path, m.root)
		}
		rel = strings.TrimPrefix(path, m.root)
	}
	// /proc/PID/cgroup and mountinfo give paths relative to the reader's
	// cgroup namespace root (kernel/cgroup/cgroup.c: proc_cgroup_show
	// and cgroup_show_path call cgroup_path_ns, kernfs_path_from_node,
	// with current's cgroup_ns): a cgroup outside it reads "/../x",
	// climbing with "..". Both are relative to the same root, so a mount
	// of a cgroup outside the namespace (the host's hierarchy bind-mounted
	// into a container with a cgroup namespace of its own: root "/../..")
	// still holds the paths below its root ("/../../k/c" is "/k/c" in
	// it). What is left after the root must not climb: filepath.Clean
	// would fold "/../x" into the mount ("/x", another cgroup); that
	// cgroup is out of the shim's reach instead.
	if slices.Contains(strings.Split(rel, "/"), "..") {
		return "", fmt.Errorf("cgroup %s is outside the mounted %s, above the shim's cgroup namespace", path, m.root)
	}
	p := filepath.Join(m.dir, filepath.Clean("/"+rel), "cgroup.procs")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

type mounts struct{ v1Memory, v2 *cgroupMount }

// cgroupMounts finds the v1 memory and the v2 hierarchies in mountinfo
// (man 5 proc: the fields before " - " are id, parent, dev, root, mount
// point, options; after it the fs type, source and super options).
func cgroupMounts(mountinfo string) (mounts, error) {
	var ms mounts
	f, err := os.Open(mountinfo)
	if err != nil {
		return ms, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		m := &cgroupMount{dir: unescape(a[4]), root: unescape(a[3])}
		switch b[0] {
		case "cgroup2":
			if ms.v2 == nil {
				ms.v2 = m
			}
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				if o == "memory" && ms.v1Memory == nil {
					ms.v1Memory = m
				}
			}
		}
	}
	return ms, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
