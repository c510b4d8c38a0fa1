package abi

// SizeOfIPC64Perm is sizeof(struct ipc64_perm).
const SizeOfIPC64Perm = 48

// IPC64Perm is struct ipc64_perm, include/uapi/asm-generic/ipcbuf.h
// (x86_64 and arm64 both use the generic one):
//
//	__kernel_key_t   key;        //  0
//	__kernel_uid32_t uid;        //  4
//	__kernel_gid32_t gid;        //  8
//	__kernel_uid32_t cuid;       // 12
//	__kernel_gid32_t cgid;       // 16
//	__kernel_mode_t  mode;       // 20, unsigned int on both
//	unsigned char    __pad1[0];  //     4 - sizeof(mode)
//	unsigned short   seq;        // 24
//	unsigned short   __pad2;     // 26
//	__kernel_ulong_t __unused1;  // 32
//	__kernel_ulong_t __unused2;  // 40
type IPC64Perm struct {
	Key  int32
	UID  uint32
	GID  uint32
	CUID uint32
	CGID uint32
	Mode uint32
	Seq  uint16
}

// MarshalBytes writes p to dst[:SizeOfIPC64Perm].
func (p *IPC64Perm) MarshalBytes(dst []byte) {
	dst = dst[:SizeOfIPC64Perm]
	clear(dst)
	le.PutUint32(dst[0:], uint32(p.Key))
	le.PutUint32(dst[4:], p.UID)
	le.PutUint32(dst[8:], p.GID)
	le.PutUint32(dst[12:], p.CUID)
	le.PutUint32(dst[16:], p.CGID)
	le.PutUint32(dst[20:], p.Mode)
	le.PutUint16(dst[24:], p.Seq)
}

// UnmarshalBytes reads p from src[:SizeOfIPC64Perm].
func (p *IPC64Perm) UnmarshalBytes(src []byte) {
	src = src[:SizeOfIPC64Perm]
	p.Key = int32(le.Uint32(src[0:]))
	p.UID = le.Uint32(src[4:])
	p.GID = le.Uint32(src[8:])
	p.CUID = le.Uint32(src[12:])
	p.CGID = le.Uint32(src[16:])
	p.Mode = le.Uint32(src[20:])
	p.Seq = le.Uint16(src[24:])
}
