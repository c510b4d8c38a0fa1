package abi

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// layoutC prints, for every structure the package mirrors, its sizeof and
// the offset and size of every field (nested ipc64_perm fields too), as
// "struct field offset size" and "struct sizeof size". The kernel's own
// uapi headers are used, not glibc's. generic_semid64_ds is the
// asm-generic semid64_ds (arm64's); on x86_64 it is included under
// another name beside the x86 one.
const layoutC = `
#include <stdio.h>
#include <stddef.h>
#if defined(__x86_64__)
#define semid64_ds generic_semid64_ds
#include <asm-generic/sembuf.h>
#undef semid64_ds
#else
#define generic_semid64_ds semid64_ds
#endif
#include <asm/ipcbuf.h>
#include <asm/sembuf.h>
#include <asm/msgbuf.h>
#include <linux/sem.h>
#include <linux/msg.h>
#include <linux/time_types.h>

#define F(s, f) printf("%s %s %zu %zu\n", #s, #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define S(s) printf("%s sizeof %zu\n", #s, sizeof(struct s))
#define PERM(s, p) F(s, p.key); F(s, p.uid); F(s, p.gid); F(s, p.cuid); F(s, p.cgid); \
	F(s, p.mode); F(s, p.__pad1); F(s, p.seq); F(s, p.__pad2); F(s, p.__unused1); F(s, p.__unused2)

int main(void) {
	S(ipc64_perm);
	F(ipc64_perm, key); F(ipc64_perm, uid); F(ipc64_perm, gid); F(ipc64_perm, cuid);
	F(ipc64_perm, cgid); F(ipc64_perm, mode); F(ipc64_perm, __pad1); F(ipc64_perm, seq);
	F(ipc64_perm, __pad2); F(ipc64_perm, __unused1); F(ipc64_perm, __unused2);

	S(semid64_ds);
	PERM(semid64_ds, sem_perm);
	F(semid64_ds, sem_otime); F(semid64_ds, sem_ctime); F(semid64_ds, sem_nsems);
	F(semid64_ds, __unused3); F(semid64_ds, __unused4);
#if defined(__x86_64__)
	F(semid64_ds, __unused1); F(semid64_ds, __unused2);
#endif

	S(generic_semid64_ds);
	PERM(generic_semid64_ds, sem_perm);
	F(generic_semid64_ds, sem_otime); F(generic_semid64_ds, sem_ctime); F(generic_semid64_ds, sem_nsems);
	F(generic_semid64_ds, __unused3); F(generic_semid64_ds, __unused4);

	S(msqid64_ds);
	PERM(msqid64_ds, msg_perm);
	F(msqid64_ds, msg_stime); F(msqid64_ds, msg_rtime); F(msqid64_ds, msg_ctime);
	F(msqid64_ds, msg_cbytes); F(msqid64_ds, msg_qnum); F(msqid64_ds, msg_qbytes);
	F(msqid64_ds, msg_lspid); F(msqid64_ds, msg_lrpid); F(msqid64_ds, __unused4); F(msqid64_ds, __unused5);

	S(seminfo);
	F(seminfo, semmap); F(seminfo, semmni); F(seminfo, semmns); F(seminfo, semmnu); F(seminfo, semmsl);
	F(seminfo, semopm); F(seminfo, semume); F(seminfo, semusz); F(seminfo, semvmx); F(seminfo, semaem);

	S(msginfo);
	F(msginfo, msgpool); F(msginfo, msgmap); F(msginfo, msgmax); F(msginfo, msgmnb);
	F(msginfo, msgmni); F(msginfo, msgssz); F(msginfo, msgtql); F(msginfo, msgseg);

	S(sembuf);
	F(sembuf, sem_num); F(sembuf, sem_op); F(sembuf, sem_flg);

	F(msgbuf, mtype); F(msgbuf, mtext);

	S(__kernel_timespec);
	F(__kernel_timespec, tv_sec); F(__kernel_timespec, tv_nsec);
	return 0;
}
`

// cField is one field of a C structure.
type cField struct{ off, size int }

// cStruct is a C structure: its size and fields by name.
type cStruct struct {
	size   int
	fields map[string]cField
}

// nativeArch is the Arch of the host the C program is compiled for.
func nativeArch(t *testing.T) Arch {
	switch runtime.GOARCH {
	case "amd64":
		return AMD64
	case "arm64":
		return ARM64
	}
	t.Skipf("no layout for GOARCH %s", runtime.GOARCH)
	return 0
}

// cLayouts compiles and runs layoutC.
func cLayouts(t *testing.T) map[string]*cStruct {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(src, []byte(layoutC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-Wall", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	m := map[string]*cStruct{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			t.Fatalf("bad line %q", sc.Text())
		}
		s := m[f[0]]
		if s == nil {
			s = &cStruct{fields: map[string]cField{}}
			m[f[0]] = s
		}
		n := make([]int, len(f)-2)
		for i := range n {
			if n[i], err = strconv.Atoi(f[i+2]); err != nil {
				t.Fatalf("bad line %q", sc.Text())
			}
		}
		if f[1] == "sizeof" {
			s.size = n[0]
		} else {
			s.fields[f[1]] = cField{n[0], n[1]}
		}
	}
	return m
}

// layoutCase is a Go type checked against a C structure: sample is a
// value with every field distinct and as wide as its type allows; want
// gives the value each C field must hold when sample is marshalled
// (fields not named, padding and unused ones, must be zero).
type layoutCase struct {
	c         string
	size      int
	sample    any
	marshal   func(dst []byte)
	unmarshal func(src []byte) any
	want      map[string]uint64
}

func permWant(prefix string) map[string]uint64 {
	return map[string]uint64{
		prefix + "key": 0xfffffffe, prefix + "uid": 0x11223344, prefix + "gid": 0x55667788,
		prefix + "cuid": 0x99aabbcc, prefix + "cgid": 0xddeeff01, prefix + "mode": 0x000541ff,
		prefix + "seq": 0xbeef,
	}
}

var samplePerm = IPC64Perm{Key: -2, UID: 0x11223344, GID: 0x55667788, CUID: 0x99aabbcc, CGID: 0xddeeff01, Mode: 0x000541ff, Seq: 0xbeef}

func merge(ms ...map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func semidCase(c string, arch Arch) layoutCase {
	s := SemidDS{Perm: samplePerm, Otime: -1234567890123, Ctime: 0x0102030405060708, Nsems: 0xf0e0d0c0b0a09080}
	return layoutCase{
		c: c, size: SizeOfSemidDS(arch), sample: s,
		marshal:   func(dst []byte) { s.MarshalBytes(arch, dst) },
		unmarshal: func(src []byte) any { var v SemidDS; v.UnmarshalBytes(arch, src); return v },
		want: merge(permWant("sem_perm."), map[string]uint64{
			"sem_otime": uint64(s.Otime), "sem_ctime": uint64(s.Ctime), "sem_nsems": s.Nsems,
		}),
	}
}

func layoutCases(arch Arch) []layoutCase {
	p := samplePerm
	m := MsqidDS{Perm: samplePerm, Stime: -7, Rtime: 0x1112131415161718, Ctime: 0x2122232425262728,
		Cbytes: 0x3132333435363738, Qnum: 0x4142434445464748, Qbytes: 0x5152535455565758, Lspid: -3, Lrpid: 0x61626364}
	si := SemInfo{Semmap: 1, Semmni: -2, Semmns: 0x30000003, Semmnu: 4, Semmsl: 5, Semopm: 6, Semume: 7, Semusz: 8, Semvmx: 0x7fffffff, Semaem: -10}
	mi := MsgInfo{Msgpool: 1, Msgmap: -2, Msgmax: 0x30000003, Msgmnb: 4, Msgmni: 5, Msgssz: 6, Msgtql: 7, Msgseg: 0xfffe}
	sb := Sembuf{Num: 0xfffe, Op: -2, Flg: 0x1800}
	ts := Timespec{Sec: -5, Nsec: 999999999}
	return []layoutCase{
		{
			c: "ipc64_perm", size: SizeOfIPC64Perm, sample: p,
			marshal:   func(dst []byte) { p.MarshalBytes(dst) },
			unmarshal: func(src []byte) any { var v IPC64Perm; v.UnmarshalBytes(src); return v },
			want:      permWant(""),
		},
		semidCase("semid64_ds", arch),
		semidCase("generic_semid64_ds", ARM64),
		{
			c: "msqid64_ds", size: SizeOfMsqidDS, sample: m,
			marshal:   func(dst []byte) { m.MarshalBytes(dst) },
			unmarshal: func(src []byte) any { var v MsqidDS; v.UnmarshalBytes(src); return v },
			want: merge(permWant("msg_perm."), map[string]uint64{
				"msg_stime": uint64(m.Stime), "msg_rtime": uint64(m.Rtime), "msg_ctime": uint64(m.Ctime),
				"msg_cbytes": m.Cbytes, "msg_qnum": m.Qnum, "msg_qbytes": m.Qbytes,
				"msg_lspid": uint64(m.Lspid), "msg_lrpid": uint64(m.Lrpid),
			}),
		},
		{
			c: "seminfo", size: SizeOfSemInfo, sample: si,
			marshal:   func(dst []byte) { si.MarshalBytes(dst) },
			unmarshal: func(src []byte) any { var v SemInfo; v.UnmarshalBytes(src); return v },
			want: map[string]uint64{
				"semmap": uint64(si.Semmap), "semmni": uint64(si.Semmni), "semmns": uint64(si.Semmns),
				"semmnu": uint64(si.Semmnu), "semmsl": uint64(si.Semmsl), "semopm": uint64(si.Semopm),
				"semume": uint64(si.Semume), "semusz": uint64(si.Semusz), "semvmx": uint64(si.Semvmx),
				"semaem": uint64(si.Semaem),
			},
		},
		{
			c: "msginfo", size: SizeOfMsgInfo, sample: mi,
			marshal:   func(dst []byte) { mi.MarshalBytes(dst) },
			unmarshal: func(src []byte) any { var v MsgInfo; v.UnmarshalBytes(src); return v },
			want: map[string]uint64{
				"msgpool": uint64(mi.Msgpool), "msgmap": uint64(mi.Msgmap), "msgmax": uint64(mi.Msgmax),
				"msgmnb": uint64(mi.Msgmnb), "msgmni": uint64(mi.Msgmni), "msgssz": uint64(mi.Msgssz),
				"msgtql": uint64(mi.Msgtql), "msgseg": uint64(mi.Msgseg),
			},
		},
		{
			c: "sembuf", size: SizeOfSembuf, sample: sb,
			marshal:   func(dst []byte) { sb.MarshalBytes(dst) },
			unmarshal: func(src []byte) any { var v Sembuf; v.UnmarshalBytes(src); return v },
			want:      map[string]uint64{"sem_num": uint64(sb.Num), "sem_op": uint64(sb.Op), "sem_flg": uint64(sb.Flg)},
		},
		{
			c: "__kernel_timespec", size: SizeOfTimespec, sample: ts,
			marshal:   func(dst []byte) { ts.MarshalBytes(dst) },
			unmarshal: func(src []byte) any { var v Timespec; v.UnmarshalBytes(src); return v },
			want:      map[string]uint64{"tv_sec": uint64(ts.Sec), "tv_nsec": uint64(ts.Nsec)},
		},
	}
}

// getField reads the little-endian C field f of b.
func getField(b []byte, f cField) uint64 {
	var v uint64
	for i := f.size - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[f.off+i])
	}
	return v
}

// putField writes v to the little-endian C field f of b.
func putField(b []byte, f cField, v uint64) {
	for i := range f.size {
		b[f.off+i] = byte(v >> (8 * i))
	}
}

func mask(v uint64, size int) uint64 {
	if size >= 8 {
		return v
	}
	return v & (1<<(8*size) - 1)
}

// TestLayout checks every type against the C structure it mirrors: the
// SizeOf constant against sizeof; MarshalBytes against offsetof and
// sizeof of every field (each named field holds its value, every other
// byte is zero); UnmarshalBytes of a buffer laid out by the C offsets
// gives the sample back.
func TestLayout(t *testing.T) {
	arch := nativeArch(t)
	cs := cLayouts(t)
	for _, lc := range layoutCases(arch) {
		t.Run(lc.c, func(t *testing.T) {
			s := cs[lc.c]
			if s == nil || s.size == 0 {
				t.Fatalf("no C layout for %s", lc.c)
			}
			if lc.size != s.size {
				t.Fatalf("Go size %d, C sizeof %d", lc.size, s.size)
			}
			for name := range lc.want {
				if _, ok := s.fields[name]; !ok {
					t.Errorf("C struct %s has no field %s", lc.c, name)
				}
			}
			// Marshal into a dirty buffer: padding must be written zero.
			got := bytes.Repeat([]byte{0xa5}, s.size+8)
			lc.marshal(got)
			if !bytes.Equal(got[s.size:], bytes.Repeat([]byte{0xa5}, 8)) {
				t.Errorf("MarshalBytes wrote past sizeof: % x", got[s.size:])
			}
			got = got[:s.size]
			covered := make([]bool, s.size)
			built := make([]byte, s.size)
			for name, f := range s.fields {
				if f.off+f.size > s.size {
					t.Fatalf("field %s out of range", name)
				}
				for i := range f.size {
					covered[f.off+i] = true
				}
				want := mask(lc.want[name], f.size)
				if v := getField(got, f); v != want {
					t.Errorf("%s (offset %d, size %d): marshalled %#x, want %#x", name, f.off, f.size, v, want)
				}
				putField(built, f, want)
			}
			for i, c := range covered {
				if !c && got[i] != 0 {
					t.Errorf("padding byte %d is %#x, want 0", i, got[i])
				}
			}
			if v := lc.unmarshal(built); !reflect.DeepEqual(v, lc.sample) {
				t.Errorf("UnmarshalBytes of the C layout:\n got %+v\nwant %+v", v, lc.sample)
			}
		})
	}
	t.Run("msgbuf", func(t *testing.T) {
		s := cs["msgbuf"]
		if f := s.fields["mtype"]; f.off != 0 || f.size != SizeOfMtype {
			t.Errorf("mtype at %d size %d, want 0 size %d", f.off, f.size, SizeOfMtype)
		}
		if f := s.fields["mtext"]; f.off != SizeOfMtype {
			t.Errorf("mtext at %d, want %d", f.off, SizeOfMtype)
		}
		b := make([]byte, SizeOfMtype)
		MarshalMtype(b, -42)
		if v := getField(b, s.fields["mtype"]); v != uint64(0xffffffffffffffd6) {
			t.Errorf("mtype marshalled %#x", v)
		}
		if v := UnmarshalMtype(b); v != -42 {
			t.Errorf("mtype round trip %d", v)
		}
	})
}

// TestRoundTrip marshals each sample for both architectures and reads it
// back.
func TestRoundTrip(t *testing.T) {
	for _, arch := range []Arch{AMD64, ARM64} {
		for _, lc := range layoutCases(arch) {
			t.Run(fmt.Sprintf("%s/%s", arch, lc.c), func(t *testing.T) {
				b := make([]byte, lc.size)
				lc.marshal(b)
				if v := lc.unmarshal(b); !reflect.DeepEqual(v, lc.sample) {
					t.Errorf("got %+v, want %+v", v, lc.sample)
				}
			})
		}
	}
	vals := []uint16{0, 1, 0x7fff, 0xffff, 42}
	b := make([]byte, SizeOfSemval*len(vals))
	MarshalSemvals(b, vals)
	back := make([]uint16, len(vals))
	UnmarshalSemvals(b, back)
	if !reflect.DeepEqual(back, vals) {
		t.Errorf("semvals: got %v, want %v", back, vals)
	}
}

// TestShortBuffer checks that a buffer shorter than the structure panics
// rather than being written in part.
func TestShortBuffer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MarshalBytes into a short buffer did not panic")
		}
	}()
	var s SemidDS
	s.MarshalBytes(AMD64, make([]byte, SizeOfSemidDSGeneric))
}
