package task

import (
	"slices"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
)

// TestNamespaceStateBounded: the default answer is headers and counts,
// lists are cut at the limit and say so, and a set's semaphores come a
// page at a time when asked for.
func TestNamespaceStateBounded(t *testing.T) {
	e, first := benchEngines(t, 5, 100)
	st := buildNamespaceState(1, e, nil, nil, nil, time.Now(), control.Query{})
	if u := st.Usage; u.Sets != 5 || u.Semaphores != 500 || u.UndoEntries != 5 || u.Waiters != 0 {
		t.Fatalf("usage %+v", u)
	}
	if len(st.SemSets) != 5 || len(st.Truncated) != 0 {
		t.Fatalf("%d sets, truncated %v", len(st.SemSets), st.Truncated)
	}
	set := st.SemSets[0]
	if set.ID != first || set.Nsems != 100 || set.Sems != nil || set.Undos != 1 || set.Otime == 0 || set.Ctime == 0 {
		t.Fatalf("header %+v", set)
	}
	if len(st.Undo) != 5 || len(st.Undo[0].Adj) != control.InlineSems || !st.Undo[0].AdjTruncated {
		t.Fatalf("undo %+v", st.Undo[0])
	}

	st = buildNamespaceState(1, e, nil, nil, nil, time.Now(), control.Query{Limit: 2})
	if len(st.SemSets) != 2 || len(st.Undo) != 2 || !slices.Equal(st.Truncated, []string{"sem_sets", "undo"}) || st.Usage.Sets != 5 {
		t.Fatalf("limit 2: %d sets, %d undo, truncated %v", len(st.SemSets), len(st.Undo), st.Truncated)
	}

	st = buildNamespaceState(1, e, nil, nil, nil, time.Now(), control.Query{Offset: 3, Limit: 2})
	if len(st.SemSets) != 2 || st.SemSets[1].ID != st.SemSets[0].ID+1 || slices.Contains(st.Truncated, "sem_sets") {
		t.Fatalf("the last page: %+v, truncated %v", st.SemSets, st.Truncated)
	}

	st = buildNamespaceState(1, e, nil, nil, nil, time.Now(), control.Query{Set: first, HasSet: true, Offset: 90, Limit: 20})
	if len(st.SemSets) != 1 {
		t.Fatalf("detail: %d sets", len(st.SemSets))
	}
	set = st.SemSets[0]
	if set.ID != first || set.SemsOffset != 90 || len(set.Sems) != 10 || set.Sems[9].Val != 1 || set.Sems[9].Pid == nil || set.Sems[0].Val != 0 {
		t.Fatalf("page %+v", set)
	}
	if len(st.Undo) != 1 || st.Undo[0].AdjOffset != 90 || len(st.Undo[0].Adj) != 10 || st.Undo[0].Adj[9] != -1 || st.Undo[0].AdjTruncated {
		t.Fatalf("the set's undo window %+v", st.Undo)
	}

	st = buildNamespaceState(1, e, nil, nil, nil, time.Now(), control.Query{CountsOnly: true})
	if len(st.SemSets)+len(st.Undo)+len(st.Waiters)+len(st.Queues) != 0 || st.Usage.Semaphores != 500 {
		t.Fatalf("counts only: %+v", st)
	}
}
