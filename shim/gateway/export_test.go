package gateway

var CapEff = capEff

// NewTestTask returns a Task for thread tid that can only read and write
// the thread's memory: for the memory tests.
func NewTestTask(tid int) *Task { return &Task{Tid: tid, pidfd: -1} }
