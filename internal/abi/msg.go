package abi

// Sizes of the message queue structures.
const (
	// SizeOfMsqidDS is sizeof(struct msqid64_ds).
	SizeOfMsqidDS = 120
	// SizeOfMsgInfo is sizeof(struct msginfo): seven ints and an
	// unsigned short, padded to 32 (the kernel copies all 32).
	SizeOfMsgInfo = 32
	// SizeOfMtype is sizeof(msgbuf.mtype), a long: the text of a
	// message starts at this offset of the caller's msgbuf.
	SizeOfMtype = 8
)

// MsqidDS is struct msqid64_ds, include/uapi/asm-generic/msgbuf.h with
// __BITS_PER_LONG == 64 (x86_64 includes the generic one too,
// arch/x86/include/uapi/asm/msgbuf.h), which IPC_STAT, MSG_STAT and
// MSG_STAT_ANY fill and IPC_SET reads:
//
//	struct ipc64_perm msg_perm;    //   0
//	long              msg_stime;   //  48
//	long              msg_rtime;   //  56
//	long              msg_ctime;   //  64
//	unsigned long     msg_cbytes;  //  72
//	unsigned long     msg_qnum;    //  80
//	unsigned long     msg_qbytes;  //  88
//	__kernel_pid_t    msg_lspid;   //  96
//	__kernel_pid_t    msg_lrpid;   // 100
//	unsigned long     __unused4;   // 104
//	unsigned long     __unused5;   // 112
type MsqidDS struct {
	Perm   IPC64Perm
	Stime  int64
	Rtime  int64
	Ctime  int64
	Cbytes uint64
	Qnum   uint64
	Qbytes uint64
	Lspid  int32
	Lrpid  int32
}

// MarshalBytes writes m to dst[:SizeOfMsqidDS].
func (m *MsqidDS) MarshalBytes(dst []byte) {
	dst = dst[:SizeOfMsqidDS]
	clear(dst)
	m.Perm.MarshalBytes(dst)
	le.PutUint64(dst[48:], uint64(m.Stime))
	le.PutUint64(dst[56:], uint64(m.Rtime))
	le.PutUint64(dst[64:], uint64(m.Ctime))
	le.PutUint64(dst[72:], m.Cbytes)
	le.PutUint64(dst[80:], m.Qnum)
	le.PutUint64(dst[88:], m.Qbytes)
	le.PutUint32(dst[96:], uint32(m.Lspid))
	le.PutUint32(dst[100:], uint32(m.Lrpid))
}

// UnmarshalBytes reads m from src[:SizeOfMsqidDS].
func (m *MsqidDS) UnmarshalBytes(src []byte) {
	src = src[:SizeOfMsqidDS]
	m.Perm.UnmarshalBytes(src)
	m.Stime = int64(le.Uint64(src[48:]))
	m.Rtime = int64(le.Uint64(src[56:]))
	m.Ctime = int64(le.Uint64(src[64:]))
	m.Cbytes = le.Uint64(src[72:])
	m.Qnum = le.Uint64(src[80:])
	m.Qbytes = le.Uint64(src[88:])
	m.Lspid = int32(le.Uint32(src[96:]))
	m.Lrpid = int32(le.Uint32(src[100:]))
}

// MsgInfo is struct msginfo, include/uapi/linux/msg.h, which IPC_INFO and
// MSG_INFO fill:
//
//	int msgpool, msgmap, msgmax, msgmnb, msgmni, msgssz, msgtql;  // 0..24
//	unsigned short msgseg;                                        // 28
type MsgInfo struct {
	Msgpool, Msgmap, Msgmax, Msgmnb, Msgmni, Msgssz, Msgtql int32
	Msgseg                                                  uint16
}

// MarshalBytes writes m to dst[:SizeOfMsgInfo], the tail padding zero.
func (m *MsgInfo) MarshalBytes(dst []byte) {
	dst = dst[:SizeOfMsgInfo]
	clear(dst)
	for i, v := range [...]int32{m.Msgpool, m.Msgmap, m.Msgmax, m.Msgmnb, m.Msgmni, m.Msgssz, m.Msgtql} {
		le.PutUint32(dst[4*i:], uint32(v))
	}
	le.PutUint16(dst[28:], m.Msgseg)
}

// UnmarshalBytes reads m from src[:SizeOfMsgInfo].
func (m *MsgInfo) UnmarshalBytes(src []byte) {
	src = src[:SizeOfMsgInfo]
	for i, f := range [...]*int32{&m.Msgpool, &m.Msgmap, &m.Msgmax, &m.Msgmnb, &m.Msgmni, &m.Msgssz, &m.Msgtql} {
		*f = int32(le.Uint32(src[4*i:]))
	}
	m.Msgseg = le.Uint16(src[28:])
}

// MarshalMtype writes the mtype of struct msgbuf (include/uapi/linux/msg.h:
// __kernel_long_t mtype, then char mtext[]) to dst[:SizeOfMtype].
func MarshalMtype(dst []byte, mtype int64) {
	le.PutUint64(dst[:SizeOfMtype], uint64(mtype))
}

// UnmarshalMtype reads the mtype of struct msgbuf from src[:SizeOfMtype].
func UnmarshalMtype(src []byte) int64 {
	return int64(le.Uint64(src[:SizeOfMtype]))
}
