package task

import (
	"bytes"
	"context"
	"testing"
)

// The runtime info (the shim binary's -info, containerd's introspection)
// names the shim's own version, not the containerd version of the runc
// shim it is built on; that one stays, as an annotation.
func TestInfoVersion(t *testing.T) {
	m := NewManager(Version{Version: "v0.3.0-2-gabc", Revision: "abc123", Containerd: "v2.3.7"})
	info, err := m.Info(context.Background(), bytes.NewReader(nil))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name != RuntimeName {
		t.Errorf("Name %q, want %q", info.Name, RuntimeName)
	}
	if v := info.GetVersion(); v.GetVersion() != "v0.3.0-2-gabc" || v.GetRevision() != "abc123" {
		t.Errorf("Version %+v, want the shim's", v)
	}
	if got := info.GetAnnotations()[ContainerdAnnotation]; got != "v2.3.7" {
		t.Errorf("annotation %s = %q, want v2.3.7", ContainerdAnnotation, got)
	}
}
