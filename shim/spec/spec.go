// Package spec patches a container's OCI runtime spec (the bundle's
// config.json) so that runc traps the System V semaphore and message
// queue calls with SCMP_ACT_NOTIFY and hands the listener fd to the shim
// over listenerPath, and reads the IPC limits the container asks for in
// linux.sysctl.
package spec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Syscalls are the calls the shim serves.
var Syscalls = []string{"semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl"}

// NSCalls are the calls that move an existing thread to another IPC
// namespace. The gateway caches each thread's IPC namespace; it may do so
// only if it sees these calls (trapped, then let run) or the profile
// refuses them. Creating a process in a new namespace (clone, clone3)
// makes a new thread, which the gateway identifies afresh.
var NSCalls = []string{"unshare", "setns"}

// GroupCalls change a thread's supplementary groups, which the gateway
// caches with the rest of its identity and cannot reread cheaply: trapped
// where the profile allows them, they make it forget what it cached.
var GroupCalls = []string{"setgroups", "setgroups32"}

// IDCalls change a thread's uids or gids. The gateway caches each thread's
// credentials; it may do so only if it sees these calls (trapped, then let
// run) or the profile refuses them; otherwise it compares them on every
// call. An exec that changes them is reported by the kernel (tasktrace).
var IDCalls = []string{"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
	"setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32", "setresgid32", "setfsuid32", "setfsgid32"}

// ConfigFile is the OCI spec's name in a bundle.
const ConfigFile = "config.json"

// Plan is what Patch decided for one container.
type Plan struct {
	// Trapped is false for a container in the host IPC namespace: its
	// calls go to the kernel and the spec is left alone.
	Trapped bool
	// Limits are the engine namespace's limits: Linux's defaults
	// overridden by the kernel.sem, kernel.msgmax, kernel.msgmnb and
	// kernel.msgmni entries of linux.sysctl.
	Limits ipcns.Limits
	// IPCPath is the path of the IPC namespace the container joins, or ""
	// for a new one.
	IPCPath string
	// Notified lists the calls trapped (those the profile allows).
	Notified []string
	// NSFixed reports that no thread of the container can change its IPC
	// namespace unseen: each of NSCalls is trapped (listed in NSNotified)
	// or refused outright by the profile. The gateway then caches each
	// thread's IPC namespace instead of rereading it on every call.
	NSFixed bool
	// NSNotified lists the NSCalls trapped: the profile allows them
	// unconditionally, the gateway notes them and lets them run.
	NSNotified []string
	// GroupsNotified lists the GroupCalls trapped, as NSNotified. Where
	// the profile allows them only conditionally, a setgroups(2) that
	// changes no id goes unseen until the thread's next id change.
	GroupsNotified []string
	// IDsFixed reports that no thread can change its ids unseen: each of
	// IDCalls is trapped (IDsNotified) or refused outright. The gateway
	// then caches each thread's credentials.
	IDsFixed bool
	// IDsNotified lists the IDCalls trapped, as NSNotified.
	IDsNotified []string
}

// Error is a refusal that stops the container; its text says what to
// change.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// Load reads bundle/config.json.
func Load(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, ConfigFile))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(bundle, ConfigFile), err)
	}
	return &s, nil
}

// Save writes s to bundle/config.json atomically.
func Save(bundle string, s *specs.Spec) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	path := filepath.Join(bundle, ConfigFile)
	tmp := path + ".ipc-tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ipcNamespace returns whether s has an IPC namespace other than the
// host's (a new one, or one it joins by path) and that path. A path that
// names the shim's own IPC namespace is the host's.
func ipcNamespace(s *specs.Spec) (bool, string) {
	if s.Linux == nil {
		return false, ""
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.IPCNamespace {
			if ns.Path != "" && sameFile(ns.Path, "/proc/self/ns/ipc") {
				return false, ns.Path
			}
			return true, ns.Path
		}
	}
	return false, ""
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// Limits returns Linux's default limits overridden by the IPC sysctls of
// s. A value the kernel would refuse is an Error.
func Limits(s *specs.Spec) (ipcns.Limits, error) {
	l := ipcns.DefaultLimits()
	if s.Linux == nil {
		return l, nil
	}
	for _, k := range []string{"kernel.sem", "kernel.msgmax", "kernel.msgmnb", "kernel.msgmni"} {
		v, ok := s.Linux.Sysctl[k]
		if !ok {
			continue
		}
		if k == "kernel.sem" {
			if err := l.SetSem(v); err != nil {
				return l, &Error{Msg: fmt.Sprintf("linux.sysctl: %v", err)}
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<31-1 {
			return l, &Error{Msg: fmt.Sprintf("linux.sysctl: %s %q is not a non-negative 32-bit number", k, v)}
		}
		switch k {
		case "kernel.msgmax":
			l.MsgMax = n
		case "kernel.msgmnb":
			l.MsgMNB = n
		case "kernel.msgmni":
			if n > ipcns.IPCMNI {
				return l, &Error{Msg: fmt.Sprintf("linux.sysctl: kernel.msgmni %d is above Linux's limit %d", n, ipcns.IPCMNI)}
			}
			l.MsgMNI = n
		}
	}
	return l, nil
}

// nativeArches is the architecture list of a profile the shim creates.
func nativeArches() []specs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	}
	return nil
}

func allows(a specs.LinuxSeccompAction) bool {
	return a == specs.ActAllow || a == specs.ActLog
}

// Patch changes s so that runc traps the IPC calls and sends the
// listener to listenerPath. A container in the host IPC namespace is
// left alone (Plan.Trapped false). A profile that already has a listener
// is refused with an Error.
//
// The calls the profile allows are trapped: an unconditional allow rule
// loses them (libseccomp does not take two rules for one call), and one
// NOTIFY rule is added. A call that the profile refuses (by a rule or its
// default action) stays refused.
func Patch(s *specs.Spec, listenerPath string) (*Plan, error) {
	own, path := ipcNamespace(s)
	if !own {
		return &Plan{Trapped: false, Limits: ipcns.DefaultLimits()}, nil
	}
	lim, err := Limits(s)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Trapped: true, Limits: lim, IPCPath: path}
	sc := s.Linux.Seccomp
	if sc == nil {
		sc = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: nativeArches()}
		s.Linux.Seccomp = sc
	}
	if sc.ListenerPath != "" {
		return nil, &Error{Msg: fmt.Sprintf("the container's seccomp profile already has a listenerPath (%s): "+
			"runtime io.containerd.ipc.v2 needs its own seccomp listener for the System V IPC calls and runc supports only one; "+
			"remove listenerPath from the profile, or run this container with runtime io.containerd.runc.v2", sc.ListenerPath)}
	}
	for _, r := range sc.Syscalls {
		if r.Action == specs.ActNotify {
			for _, n := range r.Names {
				if slices.Contains(Syscalls, n) {
					return nil, &Error{Msg: fmt.Sprintf("the container's seccomp profile already sends %s to a listener (SCMP_ACT_NOTIFY); "+
						"runtime io.containerd.ipc.v2 serves that call itself: remove the rule, or use runtime io.containerd.runc.v2", n)}
				}
			}
		}
	}
	// Decide per call: allowed by an explicit rule, refused by one, or
	// falling to the default action.
	var keep []specs.LinuxSyscall
	decided := map[string]bool{} // name -> allowed
	for _, r := range sc.Syscalls {
		var names []string
		for _, n := range r.Names {
			if !slices.Contains(Syscalls, n) {
				names = append(names, n)
				continue
			}
			if allows(r.Action) {
				if _, seen := decided[n]; !seen {
					decided[n] = true
				}
				continue // the NOTIFY rule replaces it
			}
			if len(r.Args) == 0 {
				decided[n] = false
			}
			names = append(names, n)
		}
		if len(names) == 0 {
			continue
		}
		r.Names = names
		keep = append(keep, r)
	}
	for _, n := range Syscalls {
		allowed, seen := decided[n]
		if !seen {
			allowed = allows(sc.DefaultAction)
		}
		if allowed {
			plan.Notified = append(plan.Notified, n)
		}
	}
	// A refused call that also appeared in an allow rule (with
	// arguments) keeps its refusal: drop it from the trapped list.
	for _, r := range keep {
		if allows(r.Action) || r.Action == specs.ActNotify {
			continue
		}
		for _, n := range r.Names {
			if i := slices.Index(plan.Notified, n); i >= 0 && len(r.Args) == 0 {
				plan.Notified = slices.Delete(plan.Notified, i, i+1)
			}
		}
	}
	if len(plan.Notified) == 0 {
		// Nothing to serve: the profile refuses every IPC call.
		sc.Syscalls = keep
		plan.Trapped = false
		return plan, nil
	}
	keep = append(keep, specs.LinuxSyscall{Names: plan.Notified, Action: specs.ActNotify})
	keep, plan.NSNotified, plan.NSFixed = trapAllowed(keep, sc.DefaultAction, NSCalls)
	keep, plan.GroupsNotified, _ = trapAllowed(keep, sc.DefaultAction, GroupCalls)
	keep, plan.IDsNotified, plan.IDsFixed = trapAllowed(keep, sc.DefaultAction, IDCalls)
	seen := slices.Concat(plan.NSNotified, plan.GroupsNotified, plan.IDsNotified)
	if len(seen) > 0 {
		keep = append(keep, specs.LinuxSyscall{Names: seen, Action: specs.ActNotify})
	}
	sc.Syscalls = keep
	sc.ListenerPath = listenerPath
	if sc.ListenerMetadata == "" {
		sc.ListenerMetadata = "io.containerd.ipc.v2"
	}
	return plan, nil
}

// trapAllowed decides, for each of names (NSCalls, GroupCalls), what the
// profile (rules and default action) does with it:
//   - allowed unconditionally (ActAllow by its only rule, or by the default
//     action with no rule): it is taken out of its allow rule and returned
//     in notify, to be trapped; the gateway lets it run (CONTINUE), so the
//     profile's decision stands;
//   - refused unconditionally (errno, kill, trap): nothing to do, no thread
//     can make it;
//   - anything else (rules with argument conditions, SCMP_ACT_LOG, whose
//     logging a trap would lose, SCMP_ACT_TRACE, whose tracer decides):
//     left alone, and fixed is false.
//
// fixed reports that no name is left in the third case. Trapping a call
// the profile refuses would be wrong: the gateway's CONTINUE runs it,
// bypassing the refusal.
func trapAllowed(rules []specs.LinuxSyscall, def specs.LinuxSeccompAction, names []string) (out []specs.LinuxSyscall, notify []string, fixed bool) {
	fixed = true
	trap := map[string]bool{}
	for _, n := range names {
		var named []specs.LinuxSyscall
		for _, r := range rules {
			if slices.Contains(r.Names, n) {
				named = append(named, r)
			}
		}
		action, simple := def, true
		switch {
		case len(named) > 1:
			simple = false
		case len(named) == 1:
			action, simple = named[0].Action, len(named[0].Args) == 0
		}
		switch {
		case !simple:
			fixed = false
		case action == specs.ActAllow:
			trap[n] = true
			notify = append(notify, n)
		case refuses(action):
		default:
			fixed = false
		}
	}
	for _, r := range rules {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return trap[n] })
			if len(r.Names) == 0 {
				continue
			}
		}
		out = append(out, r)
	}
	return out, notify, fixed
}

// refuses reports whether action stops a call from running, whatever its
// arguments.
func refuses(a specs.LinuxSeccompAction) bool {
	switch a {
	case specs.ActErrno, specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap:
		return true
	}
	return false
}
