package tasktrace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// progLoadAttr is the head of union bpf_attr for BPF_PROG_LOAD
// (include/uapi/linux/bpf.h) up to attach_btf_obj_fd: the fields a BTF
// raw tracepoint program needs. The kernel zero-checks the rest of the
// union only up to the size passed.
type progLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              uint64
	license            uint64
	logLevel           uint32
	logSize            uint32
	logBuf             uint64
	kernVersion        uint32
	progFlags          uint32
	progName           [unix.BPF_OBJ_NAME_LEN]byte
	progIfindex        uint32
	expectedAttachType uint32
	progBTFFd          uint32
	funcInfoRecSize    uint32
	funcInfo           uint64
	funcInfoCnt        uint32
	lineInfoRecSize    uint32
	lineInfo           uint64
	lineInfoCnt        uint32
	attachBTFID        uint32
	attachBTFObjFd     uint32
	_                  uint32
}

// loadRawTracepoint loads spec as a BTF raw tracepoint program attached
// to the vmlinux BTF type attachID (its tracepoint's btf_trace_<name>
// typedef). It is what cilium/ebpf's loader does for such a program, less
// looking attachID up in the kernel's BTF, which would parse all of it:
// the id comes from kernelFacts.
func loadRawTracepoint(spec *ebpf.ProgramSpec, attachID uint32) (*ebpf.Program, error) {
	insns := make(asm.Instructions, len(spec.Instructions))
	copy(insns, spec.Instructions)
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		return nil, fmt.Errorf("marshal %s: %w", spec.Name, err)
	}
	code := buf.Bytes()
	license := append([]byte(spec.License), 0)
	attr := progLoadAttr{
		progType:           unix.BPF_PROG_TYPE_TRACING,
		insnCnt:            uint32(len(code) / asm.InstructionSize),
		insns:              uint64(uintptr(unsafe.Pointer(&code[0]))),
		license:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		expectedAttachType: unix.BPF_TRACE_RAW_TP,
		attachBTFID:        attachID,
	}
	copy(attr.progName[:unix.BPF_OBJ_NAME_LEN-1], spec.Name)
	fd, err := bpfProgLoad(&attr)
	if err != nil {
		// Again with the verifier's log, for the error.
		log := make([]byte, 256<<10)
		attr.logLevel, attr.logSize = 1, uint32(len(log))
		attr.logBuf = uint64(uintptr(unsafe.Pointer(&log[0])))
		if fd2, err2 := bpfProgLoad(&attr); err2 == nil {
			unix.Close(fd2) // loaded the second time: report the first error
		} else {
			err = fmt.Errorf("%w: %s", err, lastLines(unix.ByteSliceToString(log), 5))
		}
		runtime.KeepAlive(log)
	}
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	if err != nil {
		return nil, fmt.Errorf("load %s (attach BTF id %d): %w", spec.Name, attachID, err)
	}
	p, err := ebpf.NewProgramFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return p, nil
}

func bpfProgLoad(attr *progLoadAttr) (int, error) {
	for try := 0; ; try++ {
		fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
		if (errno == unix.EAGAIN || errno == unix.EINTR) && try < 5 {
			continue // the verifier was interrupted (libbpf retries too)
		}
		if errno != 0 {
			return -1, errno
		}
		return int(fd), nil // the kernel's bpf fds are close-on-exec
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// errWrongTracepoint: the kernel attached a program to another tracepoint
// than the one asked for (a cached attach id that is wrong).
var errWrongTracepoint = errors.New("attached to another tracepoint")
