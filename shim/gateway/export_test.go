package gateway

// ProcMemIO exposes the /proc/<tid>/mem copy to the tests and benchmarks
// that compare it with process_vm_readv/writev.
func (t *Task) ProcMemIO(addr uint64, b []byte, write bool) error { return t.procMemIO(addr, b, write) }

var CapEff = capEff
