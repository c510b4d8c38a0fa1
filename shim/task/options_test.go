package task

import (
	"testing"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
)

// CRI sends runtimeoptions.Options to a runtime type other than runc's;
// runc's shim would panic on it.
func TestRuntimeOptionsFromCRI(t *testing.T) {
	in, err := typeurl.MarshalAnyToProto(&runtimeoptions.Options{
		TypeUrl:    "io.containerd.runc.v1.Options",
		ConfigBody: []byte("BinaryName = \"/usr/local/sbin/runc\"\nSystemdCgroup = true\nRoot = \"/run/x\"\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := RuncOptions(in)
	if err != nil {
		t.Fatal(err)
	}
	v, err := typeurl.UnmarshalAny(out)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := v.(*runcoptions.Options)
	if !ok || o.BinaryName != "/usr/local/sbin/runc" || !o.SystemdCgroup || o.Root != "/run/x" {
		t.Fatalf("%T %+v", v, v)
	}
	// Empty envelope: runc's defaults.
	in, _ = typeurl.MarshalAnyToProto(&runtimeoptions.Options{})
	if _, err = RuncOptions(in); err != nil {
		t.Fatal(err)
	}
	// runc's own options pass through; none stays none.
	in, _ = typeurl.MarshalAnyToProto(&runcoptions.Options{BinaryName: "runc"})
	if out, err = RuncOptions(in); err != nil || out != in {
		t.Fatal(out, err)
	}
	if out, err = RuncOptions(nil); err != nil || out != nil {
		t.Fatal(out, err)
	}
	// Bad TOML is an error, not a panic.
	in, _ = typeurl.MarshalAnyToProto(&runtimeoptions.Options{ConfigBody: []byte("BinaryName = [")})
	if _, err = RuncOptions(in); err == nil {
		t.Fatal("bad TOML accepted")
	}
}

func TestNamespacesLifecycle(t *testing.T) {
	n := NewEngineTable()
	n.Prepare("a", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Prepare("b", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	if !n.Attach("a", 100, 0) || n.Attach("b", 100, 0) || n.Attach("a", 100, 0) {
		t.Fatal("a pod's containers share one namespace")
	}
	n.Prepare("c", ipcDefault(), gateway.ListenerOptions{}, ctrMeta{})
	n.Attach("c", 200, 0)
	if n.Len() != 2 {
		t.Fatal(n.Len())
	}
	if n.Remove("a") != 0 || n.Len() != 2 {
		t.Fatal("freed while b is a member")
	}
	if n.Remove("b") != 100 || n.Len() != 1 || n.Remove("c") != 200 || n.Len() != 0 {
		t.Fatal("not freed")
	}
}

func ipcDefault() ipcns.Limits { return ipcns.DefaultLimits() }
