package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// This file reads a calling thread's identity from /proc: credentials
// mapped through its user namespace, its pid namespace chain, its IPC
// namespace. Everything read through /proc/<tid> describes the notifying
// task only if that task was still waiting afterwards: build checks the
// notification with ID_VALID after reading (seccomp_unotify(2)).

// capEff returns thread tid's effective capability set (capget(2): one
// cheap call, where /proc/<tid>/status costs a file read and a parse).
func capEff(tid int) (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3, Pid: int32(tid)}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

func pidfdCreds(pidfd int) (credKey, error) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_CREDS}
	if err := unix.IoctlPidfdInfo(pidfd, &info); err != nil {
		return credKey{}, err
	}
	return keyOf(&info), nil
}

func keyOf(info *unix.PidfdInfo) credKey {
	return credKey{info.Ruid, info.Euid, info.Suid, info.Fsuid, info.Rgid, info.Egid, info.Sgid, info.Fsgid}
}

// pidNamespace returns the pid namespace of the task at dir, whose
// namespace is depth levels below the shim's (NStgid has depth numbers),
// registering the chain of namespaces on first sight by nsfs inode.
func (g *Gateway) pidNamespace(dir string, depth int) (*ipcns.PidNamespace, error) {
	if depth <= 1 {
		return g.rootNS, nil
	}
	fd, err := unix.Open(dir+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open pid namespace: %w", err)
	}
	// inodes from the task's namespace up to the child of the root.
	inos := make([]uint64, 0, depth-1)
	for i := 0; i < depth-1; i++ {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, err
		}
		inos = append(inos, st.Ino)
		if i == depth-2 {
			break
		}
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("NS_GET_PARENT: %w", err)
		}
		fd = parent
	}
	unix.Close(fd)
	g.tmu.Lock()
	defer g.tmu.Unlock()
	ns := g.rootNS
	for i := len(inos) - 1; i >= 0; i-- {
		child := g.pidns[inos[i]]
		if child == nil || child.Parent() != ns {
			child = ipcns.NewPidNamespace(ns, inos[i])
			g.pidns[inos[i]] = child
		}
		ns = child
	}
	return ns, nil
}

// nsInode returns the inode of a /proc/.../ns/* link ("ipc:[4026531839]").
// IPCNamespace returns the inode of process pid's IPC namespace: the key
// by which callers are told apart (Task.IPCNS).
func IPCNamespace(pid int) (uint64, error) {
	return nsInode("/proc/" + strconv.Itoa(pid) + "/ns/ipc")
}

func nsInode(path string) (uint64, error) {
	var buf [64]byte
	n, err := unix.Readlink(path, buf[:])
	if err != nil {
		return 0, fmt.Errorf("readlink %s: %w", path, err)
	}
	s := buf[:n]
	i, j := bytes.IndexByte(s, '['), bytes.IndexByte(s, ']')
	if i < 0 || j < i {
		return 0, fmt.Errorf("readlink %s: unexpected %q", path, s)
	}
	return strconv.ParseUint(string(s[i+1:j]), 10, 64)
}

type status struct {
	tgid              int
	euid, egid, fsgid uint32
	groups            []uint32
	capEff            uint64
	nstgid            []int32
	nspid             []int32
}

func readStatus(dir string) (*status, error) {
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		if errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrNotExist) {
			return nil, ErrTaskGone
		}
		return nil, err
	}
	return parseStatus(b)
}

func parseStatus(b []byte) (*status, error) {
	st := &status{}
	seen := 0
	for len(b) > 0 {
		var k, v []byte
		k, v, b = nextStatusField(b)
		f := strings.Fields(string(v))
		var err error
		switch string(k) {
		case "Tgid":
			seen |= 1
			st.tgid, err = strconv.Atoi(f[0])
		case "Uid":
			seen |= 2
			st.euid, err = field32(f, 1)
		case "Gid":
			seen |= 4
			if st.egid, err = field32(f, 1); err == nil {
				st.fsgid, err = field32(f, 3)
			}
		case "Groups":
			for i := range f {
				g, gerr := field32(f, i)
				if gerr != nil {
					err = gerr
					break
				}
				st.groups = append(st.groups, g)
			}
		case "NStgid":
			seen |= 8
			for _, s := range f {
				n, nerr := strconv.ParseInt(s, 10, 32)
				if nerr != nil {
					err = nerr
					break
				}
				st.nstgid = append(st.nstgid, int32(n))
			}
		case "NSpid":
			for _, s := range f {
				n, nerr := strconv.ParseInt(s, 10, 32)
				if nerr != nil {
					err = nerr
					break
				}
				st.nspid = append(st.nspid, int32(n))
			}
		case "CapEff":
			seen |= 16
			st.capEff, err = strconv.ParseUint(strings.TrimSpace(string(v)), 16, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("status field %s: %w", k, err)
		}
	}
	if seen != 31 {
		return nil, fmt.Errorf("status: missing fields (have %05b)", seen)
	}
	return st, nil
}

// nextStatusField splits the first "Key:\tvalue" line off a /proc status
// file's text b: its key, its value (empty for a line without a colon) and
// the text after the line.
func nextStatusField(b []byte) (key, val, rest []byte) {
	line, rest, _ := bytes.Cut(b, []byte{'\n'})
	key, val, _ = bytes.Cut(line, []byte{':'})
	return key, val, rest
}

func field32(f []string, i int) (uint32, error) {
	if i >= len(f) {
		return 0, errors.New("short field")
	}
	n, err := strconv.ParseUint(f[i], 10, 32)
	return uint32(n), err
}

// idMap is a uid_map or gid_map as the shim reads it: inner outer count.
type idMap [][3]uint32

// overflowID is the kernel's overflowuid/overflowgid for unmapped ids.
const overflowID = 65534

func readIDMap(path string) (idMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m idMap
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		var e [3]uint32
		for i := range e {
			n, err := strconv.ParseUint(f[i], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			e[i] = uint32(n)
		}
		m = append(m, e)
	}
	return m, nil
}

// toInner maps an id as the shim sees it to the task's user namespace.
func (m idMap) toInner(id uint32) uint32 {
	for _, e := range m {
		if id >= e[1] && uint64(id) < uint64(e[1])+uint64(e[2]) {
			return e[0] + (id - e[1])
		}
	}
	return overflowID
}
