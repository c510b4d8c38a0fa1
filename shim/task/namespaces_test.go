package task

import (
	"os"
	"testing"
)

// Namespaces not a container's are bounded: at MaxNested the ones no
// process is in are freed, the ones in use stay.
func TestNestedBounded(t *testing.T) {
	n := NewEngineTable()
	mine, err := IPCInode(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.engines(mine, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	// Inodes no process is in (nsfs inodes are small numbers near
	// 0xF0000000; these are far from any).
	for i := 0; i < 3*MaxNested; i++ {
		if _, err := n.engines(uint64(1<<40+i), os.Getpid()); err != nil {
			t.Fatalf("namespace %d: %v", i, err)
		}
		if n.nestedCount > MaxNested {
			t.Fatalf("%d namespaces, bound %d", n.nestedCount, MaxNested)
		}
	}
	if !n.Known(mine) {
		t.Fatal("the sweep freed a namespace a process is in")
	}
	if n.Known(1 << 40) {
		t.Fatal("the sweep left a namespace nobody is in")
	}
}
