package spec

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func withIPC(sc *specs.LinuxSeccomp) *specs.Spec {
	return &specs.Spec{Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}},
		Seccomp:    sc,
	}}
}

func notifyRule(sc *specs.LinuxSeccomp) *specs.LinuxSyscall {
	for i := range sc.Syscalls {
		if sc.Syscalls[i].Action == specs.ActNotify {
			return &sc.Syscalls[i]
		}
	}
	return nil
}

func TestNoProfile(t *testing.T) {
	s := withIPC(nil)
	p, err := Patch(s, "/run/x.sock")
	if err != nil || !p.Trapped {
		t.Fatal(p, err)
	}
	sc := s.Linux.Seccomp
	if sc.DefaultAction != specs.ActAllow || sc.ListenerPath != "/run/x.sock" {
		t.Fatalf("%+v", sc)
	}
	if r := notifyRule(sc); r == nil || !slices.Equal(r.Names, Syscalls) {
		t.Fatalf("%+v", sc.Syscalls)
	}
}

func TestHostIPCUntouched(t *testing.T) {
	s := &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}}}}
	p, err := Patch(s, "/run/x.sock")
	if err != nil || p.Trapped || s.Linux.Seccomp != nil {
		t.Fatal(p, err, s.Linux.Seccomp)
	}
	s = &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.IPCNamespace, Path: "/proc/self/ns/ipc"}}}}
	if p, err = Patch(s, "/run/x.sock"); err != nil || p.Trapped {
		t.Fatal("joining the shim's own IPC namespace must be pass-through", p, err)
	}
}

func TestAllowListProfile(t *testing.T) {
	// Docker/containerd style: deny by default, allow list.
	sc := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"read", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv", "write"}, Action: specs.ActAllow},
		{Names: []string{"msgctl"}, Action: specs.ActErrno},
	}}
	s := withIPC(sc)
	p, err := Patch(s, "/run/x.sock")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv"}
	if !slices.Equal(p.Notified, want) {
		t.Fatalf("notified %v", p.Notified)
	}
	if !slices.Equal(sc.Syscalls[0].Names, []string{"read", "write"}) {
		t.Fatalf("allow rule kept IPC calls: %v", sc.Syscalls[0].Names)
	}
	if sc.Syscalls[1].Names[0] != "msgctl" || sc.Syscalls[1].Action != specs.ActErrno {
		t.Fatal("deny rule lost")
	}
	if r := notifyRule(sc); r == nil || !slices.Equal(r.Names, want) {
		t.Fatalf("%+v", sc.Syscalls)
	}
}

func TestDenyByDefaultWithoutAllow(t *testing.T) {
	sc := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
	p, err := Patch(withIPC(sc), "/run/x.sock")
	if err != nil || p.Trapped || sc.ListenerPath != "" {
		t.Fatal("a profile refusing every IPC call needs no listener", p, err)
	}
}

func TestRefuseListener(t *testing.T) {
	_, err := Patch(withIPC(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow, ListenerPath: "/run/other.sock"}), "/run/x.sock")
	var se *Error
	if !errors.As(err, &se) || !strings.Contains(se.Msg, "/run/other.sock") {
		t.Fatal(err)
	}
	_, err = Patch(withIPC(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"semop"}, Action: specs.ActNotify}}}), "/run/x.sock")
	if !errors.As(err, &se) {
		t.Fatal(err)
	}
}

func TestLimits(t *testing.T) {
	s := withIPC(nil)
	s.Linux.Sysctl = map[string]string{"kernel.sem": "250 32000 32 128", "kernel.msgmax": "100", "kernel.msgmnb": "2000", "kernel.msgmni": "7", "net.ipv4.ip_forward": "1"}
	p, err := Patch(s, "/x")
	if err != nil {
		t.Fatal(err)
	}
	l := p.Limits
	if l.SemMSL != 250 || l.SemMNS != 32000 || l.SemOPM != 32 || l.SemMNI != 128 || l.MsgMax != 100 || l.MsgMNB != 2000 || l.MsgMNI != 7 {
		t.Fatalf("%+v", l)
	}
	for _, bad := range []map[string]string{{"kernel.sem": "1 2 3"}, {"kernel.msgmni": "-1"}, {"kernel.msgmax": "x"}, {"kernel.msgmni": "40000"}} {
		s := withIPC(nil)
		s.Linux.Sysctl = bad
		if _, err := Patch(s, "/x"); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}

func TestNSCalls(t *testing.T) {
	argRule := specs.LinuxSyscall{Names: []string{"unshare"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0x20000, Op: specs.OpMaskedEqual, ValueTwo: 0}}}
	for _, tc := range []struct {
		name       string
		sc         *specs.LinuxSeccomp
		notified   []string
		fixed      bool
		allowNames []string // the first rule's names afterwards
	}{
		{"no profile", nil, []string{"unshare", "setns"}, true, nil},
		{"allow by default", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, []string{"unshare", "setns"}, true, nil},
		{"refused by default (docker without CAP_SYS_ADMIN)", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno,
			Syscalls: []specs.LinuxSyscall{{Names: []string{"read", "semop"}, Action: specs.ActAllow}}}, nil, true, []string{"read"}},
		{"setns allowed by a rule, unshare refused by default", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno,
			Syscalls: []specs.LinuxSyscall{{Names: []string{"read", "setns", "semop"}, Action: specs.ActAllow}}}, []string{"setns"}, true, []string{"read"}},
		{"unshare refused by a rule", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
			Syscalls: []specs.LinuxSyscall{{Names: []string{"unshare"}, Action: specs.ActErrno}}}, []string{"setns"}, true, []string{"unshare"}},
		{"unshare allowed with conditions", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno,
			Syscalls: []specs.LinuxSyscall{argRule, {Names: []string{"semop"}, Action: specs.ActAllow}}}, nil, false, []string{"unshare"}},
		{"logged by default", &specs.LinuxSeccomp{DefaultAction: specs.ActLog}, nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withIPC(tc.sc)
			p, err := Patch(s, "/run/x.sock")
			if err != nil || !p.Trapped {
				t.Fatal(p, err)
			}
			if !slices.Equal(p.NSNotified, tc.notified) || p.NSFixed != tc.fixed {
				t.Fatalf("NSNotified %v NSFixed %v, want %v %v", p.NSNotified, p.NSFixed, tc.notified, tc.fixed)
			}
			var trapped []string
			for _, r := range s.Linux.Seccomp.Syscalls {
				for _, n := range r.Names {
					if slices.Contains(NSCalls, n) && r.Action == specs.ActNotify {
						trapped = append(trapped, n)
					}
					if slices.Contains(tc.notified, n) && r.Action != specs.ActNotify {
						t.Fatalf("%s still in a %s rule", n, r.Action)
					}
				}
			}
			if !slices.Equal(trapped, tc.notified) {
				t.Fatalf("NOTIFY rules name %v", trapped)
			}
			if tc.allowNames != nil && !slices.Equal(s.Linux.Seccomp.Syscalls[0].Names, tc.allowNames) {
				t.Fatalf("first rule %v, want %v", s.Linux.Seccomp.Syscalls[0].Names, tc.allowNames)
			}
		})
	}
}

func TestGroupCalls(t *testing.T) {
	s := withIPC(nil)
	p, err := Patch(s, "/run/x.sock")
	if err != nil || !slices.Equal(p.GroupsNotified, GroupCalls) {
		t.Fatal(p, err)
	}
	// Docker style: setgroups allowed by the allow list, setgroups32 not
	// listed (refused by default).
	sc := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"read", "setgroups", "semop"}, Action: specs.ActAllow}}}
	if p, err = Patch(withIPC(sc), "/run/x.sock"); err != nil || !slices.Equal(p.GroupsNotified, []string{"setgroups"}) {
		t.Fatal(p, err)
	}
	if !slices.Equal(sc.Syscalls[0].Names, []string{"read"}) {
		t.Fatalf("allow rule %v", sc.Syscalls[0].Names)
	}
	last := sc.Syscalls[len(sc.Syscalls)-1]
	if last.Action != specs.ActNotify || !slices.Equal(last.Names, []string{"setgroups"}) {
		t.Fatalf("last rule %+v", last)
	}
}

// TestPatchNeverTrapsARefusal patches random profiles and checks the rule
// that makes trapping safe: a call the profile refuses whatever its
// arguments (by its only rule, or by the default action when no rule
// names it) is never given to the shim, whose CONTINUE would run it.
func TestPatchNeverTrapsARefusal(t *testing.T) {
	names := []string{"unshare", "setns", "setgroups", "setgroups32", "semget", "semop", "msgsnd", "read"}
	actions := []specs.LinuxSeccompAction{specs.ActAllow, specs.ActErrno, specs.ActLog, specs.ActKillProcess, specs.ActTrace, specs.ActTrap}
	src := rand.New(rand.NewPCG(7, 7))
	pick := func(n int) int { return src.IntN(n) }
	for iter := 0; iter < 5000; iter++ {
		sc := &specs.LinuxSeccomp{DefaultAction: actions[pick(len(actions))]}
		for r := pick(5); r > 0; r-- {
			rule := specs.LinuxSyscall{Action: actions[pick(len(actions))]}
			for _, n := range names {
				if pick(3) == 0 {
					rule.Names = append(rule.Names, n)
				}
			}
			if len(rule.Names) == 0 {
				continue
			}
			if pick(4) == 0 {
				rule.Args = []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}
			}
			sc.Syscalls = append(sc.Syscalls, rule)
		}
		// What the original profile refuses outright.
		refused := map[string]bool{}
		for _, n := range names {
			var named []specs.LinuxSyscall
			for _, r := range sc.Syscalls {
				if slices.Contains(r.Names, n) {
					named = append(named, r)
				}
			}
			switch {
			case len(named) == 0:
				refused[n] = refuses(sc.DefaultAction)
			case len(named) == 1 && len(named[0].Args) == 0:
				refused[n] = refuses(named[0].Action)
			}
		}
		before := fmt.Sprintf("%+v", *sc)
		p, err := Patch(withIPC(sc), "/run/x.sock")
		if err != nil {
			continue // refused profiles (a listener of their own) change nothing
		}
		for _, r := range sc.Syscalls {
			if r.Action != specs.ActNotify {
				continue
			}
			for _, n := range r.Names {
				if refused[n] {
					t.Fatalf("profile %s: refused call %s trapped (plan %+v)", before, n, p)
				}
			}
		}
	}
}
