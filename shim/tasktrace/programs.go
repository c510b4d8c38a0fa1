package tasktrace

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// Event kinds, the first word of every record.
const (
	kindDeliver  = 1 // signal_deliver, in the signalled thread
	kindGenerate = 2 // signal_generate, in the sender, about the target
	kindExit     = 3 // sched_process_exit, in the exiting thread
	kindExec     = 4 // sched_process_exec, in the thread that exec'd
)

// Record layout (little endian):
//
//	0   u32 kind
//	4   u32 tid        thread the event is about
//	8   u32 tgid
//	12  s32 sig        signal number (deliver, generate)
//	16  u64 a          deliver: sa_handler; generate: group; exit: group_dead; exec: old pid
//	24  u64 b          deliver: sa_flags; generate: bpf_ktime_get_ns() (CLOCK_MONOTONIC)
//	32  [regsLen]byte  deliver: the thread's user pt_regs (x86_64 layout)
const (
	offKind, offTid, offTgid, offSig, offA, offB, offRegs = 0, 4, 8, 12, 16, 24, 32
	// regsLen is sizeof(struct pt_regs) up to and including ip: r15 ...
	// orig_ax, ip on x86_64.
	regsLen = 17 * 8
	recLen  = offRegs + regsLen
	// recSlot is the room a record takes in the ring: an 8-byte header
	// and the record, rounded up to 8 bytes (kernel/bpf/ringbuf.c).
	recSlot = (8 + recLen + 7) &^ 7
)

// bpfRbAvailData is bpf_ringbuf_query's flag for the amount of data not
// yet consumed (BPF_RB_AVAIL_DATA).
const bpfRbAvailData = 0

// Offsets into x86_64's struct pt_regs (arch/x86/include/asm/ptrace.h),
// which the kernel's BTF confirms at load (checkRegs).
const (
	regR10, regR9, regR8, regAx, regDx, regSi, regDi, regOrigAx, regIP = 56, 64, 72, 80, 96, 104, 112, 120, 128
	regBx, regCx, regBp                                                = 40, 88, 32
)

// kernelLayout holds the kernel structure offsets the programs need, read
// from the running kernel's BTF.
type kernelLayout struct {
	TaskPid, TaskTgid, TaskNsproxy uint32
	NsproxyIPC                     uint32
	IPCInum                        uint32
	// Offsets of sa_handler and sa_flags in struct k_sigaction.
	KaHandler, KaFlags uint32
	// Offsets of task_struct.signal and signal_struct.live, for kernels
	// whose sched_process_exit does not pass group_dead.
	TaskSignal, SignalLive uint32
	// ExitHasGroupDead: sched_process_exit(p, group_dead) (Linux 6.12+)
	// rather than sched_process_exit(p).
	ExitHasGroupDead bool
}

// layoutFields are the offsets loadLayout reads: the field path in a
// struct, and where the answer goes. The cache key (cache.go) hashes the
// questions, so a build that asks something else never reads another's
// answers.
var layoutFields = []struct {
	typ  string
	path []string
	dst  func(*kernelLayout) *uint32
}{
	{"task_struct", []string{"pid"}, func(l *kernelLayout) *uint32 { return &l.TaskPid }},
	{"task_struct", []string{"tgid"}, func(l *kernelLayout) *uint32 { return &l.TaskTgid }},
	{"task_struct", []string{"nsproxy"}, func(l *kernelLayout) *uint32 { return &l.TaskNsproxy }},
	{"nsproxy", []string{"ipc_ns"}, func(l *kernelLayout) *uint32 { return &l.NsproxyIPC }},
	{"ipc_namespace", []string{"ns", "inum"}, func(l *kernelLayout) *uint32 { return &l.IPCInum }},
	{"k_sigaction", []string{"sa", "sa_handler"}, func(l *kernelLayout) *uint32 { return &l.KaHandler }},
	{"k_sigaction", []string{"sa", "sa_flags"}, func(l *kernelLayout) *uint32 { return &l.KaFlags }},
	{"task_struct", []string{"signal"}, func(l *kernelLayout) *uint32 { return &l.TaskSignal }},
	{"signal_struct", []string{"live"}, func(l *kernelLayout) *uint32 { return &l.SignalLive }},
}

// Tracepoints the programs attach to (BTF raw tracepoints: the kernel
// names each one's prototype btf_trace_<name>).
const (
	tpDeliver  = "signal_deliver"
	tpGenerate = "signal_generate"
	tpExit     = "sched_process_exit"
	tpExec     = "sched_process_exec"
)

var tracepoints = []string{tpDeliver, tpGenerate, tpExit, tpExec}

func loadLayout(spec *btf.Spec) (*kernelLayout, error) {
	var err error
	var l kernelLayout
	for _, f := range layoutFields {
		if *f.dst(&l), err = fieldOffset(spec, f.typ, f.path...); err != nil {
			return nil, err
		}
	}
	if err := checkRegs(spec); err != nil {
		return nil, err
	}
	n, err := tracepointArgs(spec, tpExit)
	if err != nil {
		return nil, err
	}
	l.ExitHasGroupDead = n >= 2
	return &l, nil
}

// tracepointArgs returns the number of arguments a BTF raw tracepoint
// passes (its btf_trace_<name> prototype, less the leading context).
func tracepointArgs(spec *btf.Spec, name string) (int, error) {
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &td); err != nil {
		return 0, fmt.Errorf("BTF raw tracepoint %s: %w", name, err)
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("BTF raw tracepoint %s: not a function pointer", name)
	}
	fp, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return 0, fmt.Errorf("BTF raw tracepoint %s: not a function pointer", name)
	}
	return len(fp.Params) - 1, nil
}

// checkRegs confirms that struct pt_regs has the x86_64 layout the Go side
// decodes.
func checkRegs(spec *btf.Spec) error {
	for name, want := range map[string]uint32{"r10": regR10, "r9": regR9, "r8": regR8, "ax": regAx, "dx": regDx,
		"si": regSi, "di": regDi, "orig_ax": regOrigAx, "ip": regIP, "bx": regBx, "cx": regCx, "bp": regBp} {
		got, err := fieldOffset(spec, "pt_regs", name)
		if err != nil {
			return fmt.Errorf("pt_regs: %w (only x86_64 is supported)", err)
		}
		if got != want {
			return fmt.Errorf("pt_regs.%s at %d, want %d", name, got, want)
		}
	}
	return nil
}

// fieldOffset returns the byte offset of typ.path[0].path[1]..., looking
// through anonymous structs and unions.
func fieldOffset(spec *btf.Spec, typ string, path ...string) (uint32, error) {
	var s *btf.Struct
	if err := spec.TypeByName(typ, &s); err != nil {
		return 0, fmt.Errorf("BTF struct %s: %w", typ, err)
	}
	var total uint32
	var cur btf.Type = s
	for _, name := range path {
		off, t, ok := member(cur, name)
		if !ok {
			return 0, fmt.Errorf("BTF: no field %s in %s", name, typ)
		}
		total += off
		cur = t
	}
	return total, nil
}

func member(t btf.Type, name string) (uint32, btf.Type, bool) {
	var members []btf.Member
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = v.Members
	case *btf.Union:
		members = v.Members
	default:
		return 0, nil, false
	}
	for _, m := range members {
		if m.Name == name {
			return m.Offset.Bytes(), m.Type, true
		}
		if m.Name == "" {
			if off, mt, ok := member(m.Type, name); ok {
				return m.Offset.Bytes() + off, mt, true
			}
		}
	}
	return 0, nil, false
}

// Every program is a BTF raw tracepoint (tp_btf): its context is the
// tracepoint's arguments, one u64 each, and pointers among them are typed,
// so that loads through them are checked by the verifier against the
// kernel's types and are fault-safe. Register use: R6 the context, R7 the
// task the event is about, R8 the reserved record.

// watchedTask emits: if the IPC namespace of the task in R7 is not in
// watched, return 0.
func watchedTask(l *kernelLayout, watched *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R1, asm.R7, int16(l.TaskNsproxy), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R1, int16(l.NsproxyIPC), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R1, int16(l.IPCInum), asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.LoadMapPtr(asm.R1, watched.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
	}
}

// Loss counter slots: how many events of each class the kernel could not
// record.
const (
	lostSignals   = 0 // Deliver, Generate
	lostLifecycle = 1 // Exit, Exec
	lostUnplaced  = 2 // Deliver, Generate whose tgid lostTgids could not take
	lostSlots     = 3
)

// lostTgidsMax bounds lostTgids: the thread groups whose signal events
// were dropped since the reader last took them (Tracer.TakeLostSignals).
const lostTgidsMax = 1024

// maps are the maps the programs use.
type maps struct {
	// watched holds the inodes of the watched IPC namespaces; ring the
	// events; lost the loss counters (slots above); lostTgids the
	// thread groups whose signal events were dropped.
	watched, ring, lost, lostTgids *ebpf.Map
}

// reserve emits: R8 = a new record of the ring with kind, tid and tgid of
// the task in R7 filled in and the rest zeroed; on a full ring, count the
// loss in its class's slot of lost and return. A signal event is also
// dropped when the data not yet consumed would leave less than
// lifecycleRoom free: that room is for exits and execs only, so a signal
// storm cannot crowd them out. A dropped signal event's thread group goes
// into lostTgids (or, that map full, is counted as unplaced).
func reserve(l *kernelLayout, m *maps, kind int32) asm.Instructions {
	signal := kind == kindDeliver || kind == kindGenerate
	var ins asm.Instructions
	if signal {
		ins = append(ins,
			asm.LoadMapPtr(asm.R1, m.ring.FD()),
			asm.Mov.Imm(asm.R2, bpfRbAvailData),
			asm.FnRingbufQuery.Call(),
			asm.JGT.Imm(asm.R0, ringSize-lifecycleRoom-recSlot, "lost"),
		)
	}
	ins = append(ins,
		asm.LoadMapPtr(asm.R1, m.ring.FD()),
		asm.Mov.Imm(asm.R2, recLen),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JNE.Imm(asm.R0, 0, "reserved"),
	)
	if signal {
		// lostTgids[tgid] = 1, else lost[unplaced]++; then lost[signals]++.
		ins = append(ins,
			asm.LoadMem(asm.R1, asm.R7, int16(l.TaskTgid), asm.Word).WithSymbol("lost"),
			asm.StoreMem(asm.RFP, -16, asm.R1, asm.Word),
			asm.StoreImm(asm.RFP, -24, 1, asm.Byte),
			asm.LoadMapPtr(asm.R1, m.lostTgids.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -16),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -24),
			asm.Mov.Imm(asm.R4, 0), // BPF_ANY
			asm.FnMapUpdateElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "count"),
		)
		ins = append(ins, countLoss(m.lost, lostUnplaced, "count")...)
		count := countLoss(m.lost, lostSignals, "exit")
		count[0] = count[0].WithSymbol("count")
		ins = append(ins, count...)
	} else {
		ins = append(ins, countLoss(m.lost, lostLifecycle, "exit")...)
	}
	ins = append(ins,
		asm.Ja.Label("exit"),
		asm.Mov.Reg(asm.R8, asm.R0).WithSymbol("reserved"),
		asm.StoreImm(asm.R8, offKind, int64(kind), asm.Word),
		asm.LoadMem(asm.R1, asm.R7, int16(l.TaskPid), asm.Word),
		asm.StoreMem(asm.R8, offTid, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, int16(l.TaskTgid), asm.Word),
		asm.StoreMem(asm.R8, offTgid, asm.R1, asm.Word),
	)
	for off := offSig; off < recLen; off += 4 {
		ins = append(ins, asm.StoreImm(asm.R8, int16(off), 0, asm.Word))
	}
	return ins
}

// countLoss emits lost[slot]++, going on at label next if the slot
// cannot be found (it always can: lost has lostSlots entries).
func countLoss(lost *ebpf.Map, slot int64, next string) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -8, slot, asm.Word),
		asm.LoadMapPtr(asm.R1, lost.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, next),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	}
}

// submit emits the record's submission and the shared exit.
func submit() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufSubmit.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
}

func rawTracepoint(name, tp string, ins asm.Instructions) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{Name: name, Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp,
		AttachTo: tp, License: "GPL", Instructions: ins}
}

// deliverProgram: signal_deliver(sig, info, ka), in the thread taking the
// signal (inside get_signal, before a handler is set up or a restart
// arranged): the signal, the action's handler and flags, and the
// thread's saved user registers.
func deliverProgram(l *kernelLayout, m *maps) *ebpf.ProgramSpec {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentTaskBtf.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
	}
	ins = append(ins, watchedTask(l, m.watched)...)
	ins = append(ins, reserve(l, m, kindDeliver)...)
	ins = append(ins,
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord), // sig
		asm.StoreMem(asm.R8, offSig, asm.R1, asm.Word),
		asm.LoadMem(asm.R2, asm.R6, 2*8, asm.DWord), // ka
		asm.JEq.Imm(asm.R2, 0, "noaction"),
		asm.LoadMem(asm.R1, asm.R2, int16(l.KaHandler), asm.DWord),
		asm.StoreMem(asm.R8, offA, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R2, int16(l.KaFlags), asm.DWord),
		asm.StoreMem(asm.R8, offB, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("noaction"),
		asm.FnTaskPtRegs.Call(),
		asm.Mov.Reg(asm.R3, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, offRegs),
		asm.Mov.Imm(asm.R2, regsLen),
		asm.FnProbeReadKernel.Call(),
	)
	ins = append(ins, submit()...)
	return rawTracepoint("ipc_sig_deliver", tpDeliver, ins)
}

// signal_generate's results (include/trace/events/signal.h) for a signal
// that was queued and woke its target: DELIVERED, or LOSE_INFO (queued
// without its siginfo: the sender's user is at RLIMIT_SIGPENDING, as in
// a signal storm). IGNORED, ALREADY_PENDING and OVERFLOW_FAIL (1-3)
// queue nothing.
const (
	traceSignalDelivered = 0
	traceSignalLoseInfo  = 4
)

// generateProgram: signal_generate(sig, info, task, group, result), in the
// sender: a signal queued (traceSignalDelivered or traceSignalLoseInfo)
// for a watched thread (group 0) or process (group 1), and when.
func generateProgram(l *kernelLayout, m *maps) *ebpf.ProgramSpec {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, 4*8, asm.DWord), // result
		asm.JEq.Imm(asm.R1, traceSignalDelivered, "queued"),
		asm.JNE.Imm(asm.R1, traceSignalLoseInfo, "exit"),
		asm.LoadMem(asm.R7, asm.R6, 2*8, asm.DWord).WithSymbol("queued"), // task
		asm.JEq.Imm(asm.R7, 0, "exit"),
	}
	ins = append(ins, watchedTask(l, m.watched)...)
	// The time, read first: the tracepoint comes after complete_signal
	// woke the target, under the sender's siglock (Event.Queued); the
	// ring's reservation takes a lock of its own.
	ins = append(ins,
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R9, asm.R0),
	)
	ins = append(ins, reserve(l, m, kindGenerate)...)
	ins = append(ins,
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord),
		asm.StoreMem(asm.R8, offSig, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R6, 3*8, asm.DWord),
		asm.StoreMem(asm.R8, offA, asm.R1, asm.Word),
		asm.StoreMem(asm.R8, offB, asm.R9, asm.DWord),
	)
	ins = append(ins, submit()...)
	return rawTracepoint("ipc_sig_gen", tpGenerate, ins)
}

// exitProgram: sched_process_exit(p[, group_dead]), at the start of
// do_exit in the exiting thread: whether its thread group died with it
// (the argument, or else signal->live, which do_exit has just decremented).
func exitProgram(l *kernelLayout, m *maps) *ebpf.ProgramSpec {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, 0, asm.DWord), // p
		asm.JEq.Imm(asm.R7, 0, "exit"),
	}
	ins = append(ins, watchedTask(l, m.watched)...)
	ins = append(ins, reserve(l, m, kindExit)...)
	if l.ExitHasGroupDead {
		ins = append(ins,
			asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord),
			asm.And.Imm(asm.R1, 0xff),
			asm.StoreMem(asm.R8, offA, asm.R1, asm.Word),
		)
	} else {
		ins = append(ins,
			asm.LoadMem(asm.R1, asm.R7, int16(l.TaskSignal), asm.DWord),
			asm.JEq.Imm(asm.R1, 0, "nosignal"),
			asm.LoadMem(asm.R1, asm.R1, int16(l.SignalLive), asm.Word),
			asm.JNE.Imm(asm.R1, 0, "nosignal"),
			asm.StoreImm(asm.R8, offA, 1, asm.Word),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("nosignal"),
		)
	}
	ins = append(ins, submit()...)
	return rawTracepoint("ipc_exit", tpExit, ins)
}

// execProgram: sched_process_exec(p, old_pid, bprm), in the thread that
// exec'd, by then its thread group's leader: its tid before the exec.
func execProgram(l *kernelLayout, m *maps) *ebpf.ProgramSpec {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, 0, asm.DWord), // p
		asm.JEq.Imm(asm.R7, 0, "exit"),
	}
	ins = append(ins, watchedTask(l, m.watched)...)
	ins = append(ins, reserve(l, m, kindExec)...)
	ins = append(ins,
		asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord),
		asm.StoreMem(asm.R8, offA, asm.R1, asm.Word),
	)
	ins = append(ins, submit()...)
	return rawTracepoint("ipc_exec", tpExec, ins)
}
