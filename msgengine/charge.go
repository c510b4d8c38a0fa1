package msgengine

import "unsafe"

// msgBase is what a message is charged to the namespace's account beyond
// its text (ipcns.Account), as Linux charges msg_msg to the sender's
// memory cgroup: the engine's record and a share of the type index.
var msgBase = int64(unsafe.Sizeof(msg{})) + int64(unsafe.Sizeof(typeList{}))/2

// msgBytes is the charge of a message of size bytes of text.
func msgBytes(size int64) int64 { return msgBase + size }
