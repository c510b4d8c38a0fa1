package abi

// Sizes of the semaphore structures.
const (
	// SizeOfSemidDSAMD64 is sizeof(struct semid64_ds) on x86_64.
	SizeOfSemidDSAMD64 = 104
	// SizeOfSemidDSGeneric is sizeof(struct semid64_ds) on arm64 (the
	// asm-generic layout).
	SizeOfSemidDSGeneric = 88
	// SizeOfSemInfo is sizeof(struct seminfo).
	SizeOfSemInfo = 40
	// SizeOfSembuf is sizeof(struct sembuf).
	SizeOfSembuf = 6
	// SizeOfSemval is the size of one element of GETALL's and SETALL's
	// array, an unsigned short.
	SizeOfSemval = 2
	// SizeOfTimespec is sizeof(struct __kernel_timespec).
	SizeOfTimespec = 16
)

// SizeOfSemidDS is sizeof(struct semid64_ds) on arch.
func SizeOfSemidDS(arch Arch) int {
	if arch == ARM64 {
		return SizeOfSemidDSGeneric
	}
	return SizeOfSemidDSAMD64
}

// SemidDS is struct semid64_ds, which IPC_STAT, SEM_STAT and SEM_STAT_ANY
// fill and IPC_SET reads. Its layout depends on the architecture.
//
// x86_64, arch/x86/include/uapi/asm/sembuf.h (104 bytes):
//
//	struct ipc64_perm sem_perm;   //  0
//	__kernel_long_t   sem_otime;  // 48
//	__kernel_ulong_t  __unused1;  // 56
//	__kernel_long_t   sem_ctime;  // 64
//	__kernel_ulong_t  __unused2;  // 72
//	__kernel_ulong_t  sem_nsems;  // 80
//	__kernel_ulong_t  __unused3;  // 88
//	__kernel_ulong_t  __unused4;  // 96
//
// arm64, include/uapi/asm-generic/sembuf.h with __BITS_PER_LONG == 64
// (88 bytes):
//
//	struct ipc64_perm sem_perm;   //  0
//	long              sem_otime;  // 48
//	long              sem_ctime;  // 56
//	unsigned long     sem_nsems;  // 64
//	unsigned long     __unused3;  // 72
//	unsigned long     __unused4;  // 80
type SemidDS struct {
	Perm  IPC64Perm
	Otime int64
	Ctime int64
	Nsems uint64
}

// semidOffsets returns the offsets of sem_otime, sem_ctime and sem_nsems
// on arch.
func semidOffsets(arch Arch) (otime, ctime, nsems int) {
	if arch == ARM64 {
		return 48, 56, 64
	}
	return 48, 64, 80
}

// MarshalBytes writes s, laid out for arch, to dst[:SizeOfSemidDS(arch)].
func (s *SemidDS) MarshalBytes(arch Arch, dst []byte) {
	dst = dst[:SizeOfSemidDS(arch)]
	clear(dst)
	s.Perm.MarshalBytes(dst)
	otime, ctime, nsems := semidOffsets(arch)
	le.PutUint64(dst[otime:], uint64(s.Otime))
	le.PutUint64(dst[ctime:], uint64(s.Ctime))
	le.PutUint64(dst[nsems:], s.Nsems)
}

// UnmarshalBytes reads s, laid out for arch, from src[:SizeOfSemidDS(arch)].
func (s *SemidDS) UnmarshalBytes(arch Arch, src []byte) {
	src = src[:SizeOfSemidDS(arch)]
	s.Perm.UnmarshalBytes(src)
	otime, ctime, nsems := semidOffsets(arch)
	s.Otime = int64(le.Uint64(src[otime:]))
	s.Ctime = int64(le.Uint64(src[ctime:]))
	s.Nsems = le.Uint64(src[nsems:])
}

// SemInfo is struct seminfo, include/uapi/linux/sem.h, which IPC_INFO and
// SEM_INFO fill: ten ints in this order.
type SemInfo struct {
	Semmap, Semmni, Semmns, Semmnu, Semmsl, Semopm, Semume, Semusz, Semvmx, Semaem int32
}

func (s *SemInfo) fields() [10]*int32 {
	return [10]*int32{&s.Semmap, &s.Semmni, &s.Semmns, &s.Semmnu, &s.Semmsl, &s.Semopm, &s.Semume, &s.Semusz, &s.Semvmx, &s.Semaem}
}

// MarshalBytes writes s to dst[:SizeOfSemInfo].
func (s *SemInfo) MarshalBytes(dst []byte) {
	dst = dst[:SizeOfSemInfo]
	for i, f := range s.fields() {
		le.PutUint32(dst[4*i:], uint32(*f))
	}
}

// UnmarshalBytes reads s from src[:SizeOfSemInfo].
func (s *SemInfo) UnmarshalBytes(src []byte) {
	src = src[:SizeOfSemInfo]
	for i, f := range s.fields() {
		*f = int32(le.Uint32(src[4*i:]))
	}
}

// Sembuf is struct sembuf, include/uapi/linux/sem.h, one operation of
// semop and semtimedop:
//
//	unsigned short sem_num;  // 0
//	short          sem_op;   // 2
//	short          sem_flg;  // 4
type Sembuf struct {
	Num uint16
	Op  int16
	Flg int16
}

// MarshalBytes writes s to dst[:SizeOfSembuf].
func (s *Sembuf) MarshalBytes(dst []byte) {
	dst = dst[:SizeOfSembuf]
	le.PutUint16(dst[0:], s.Num)
	le.PutUint16(dst[2:], uint16(s.Op))
	le.PutUint16(dst[4:], uint16(s.Flg))
}

// UnmarshalBytes reads s from src[:SizeOfSembuf].
func (s *Sembuf) UnmarshalBytes(src []byte) {
	src = src[:SizeOfSembuf]
	s.Num = le.Uint16(src[0:])
	s.Op = int16(le.Uint16(src[2:]))
	s.Flg = int16(le.Uint16(src[4:]))
}

// MarshalSemvals writes GETALL's array of unsigned short, vals, to
// dst[:SizeOfSemval*len(vals)].
func MarshalSemvals(dst []byte, vals []uint16) {
	dst = dst[:SizeOfSemval*len(vals)]
	for i, v := range vals {
		le.PutUint16(dst[SizeOfSemval*i:], v)
	}
}

// UnmarshalSemvals reads SETALL's array of unsigned short into vals from
// src[:SizeOfSemval*len(vals)].
func UnmarshalSemvals(src []byte, vals []uint16) {
	src = src[:SizeOfSemval*len(vals)]
	for i := range vals {
		vals[i] = le.Uint16(src[SizeOfSemval*i:])
	}
}

// Timespec is struct __kernel_timespec, include/uapi/linux/time_types.h,
// semtimedop's timeout:
//
//	__kernel_time64_t tv_sec;   // 0
//	long long         tv_nsec;  // 8
type Timespec struct {
	Sec  int64
	Nsec int64
}

// MarshalBytes writes t to dst[:SizeOfTimespec].
func (t *Timespec) MarshalBytes(dst []byte) {
	dst = dst[:SizeOfTimespec]
	le.PutUint64(dst[0:], uint64(t.Sec))
	le.PutUint64(dst[8:], uint64(t.Nsec))
}

// UnmarshalBytes reads t from src[:SizeOfTimespec].
func (t *Timespec) UnmarshalBytes(src []byte) {
	src = src[:SizeOfTimespec]
	t.Sec = int64(le.Uint64(src[0:]))
	t.Nsec = int64(le.Uint64(src[8:]))
}
