package msgengine

import "unsafe"

// msgBase is what a message is charged to the namespace's account beyond
// its text (ipcns.Account), as Linux charges msg_msg to the sender's
// memory cgroup: the engine's record and a share of the type index. The
// text is charged where it is allocated (ipcns.Resources.AllocText).
var msgBase = int64(unsafe.Sizeof(msg{})) + int64(unsafe.Sizeof(typeList{}))/2
