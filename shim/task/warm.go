package task

import (
	"encoding/json"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// warmSpecJSON builds, off the critical path, what encoding/json builds on
// its first use of the OCI spec's types: a decoder and an encoder for each
// of the ~40 struct types reached from specs.Spec. Create's first spec.Load
// (the only one in most shims' lives) took 4-13 ms doing that in a daemon
// just started, on a busy 2-vCPU machine, against ~0.2 ms warm; NewService
// starts this while containerd is still connecting (docs/bench-shim.md).
func warmSpecJSON() {
	var s specs.Spec
	if json.Unmarshal([]byte(warmSpec), &s) == nil {
		_, _ = json.Marshal(&s)
	}
}

// warmSpec has every part of a spec that containerd writes for a Linux
// container and the shim reads or patches.
const warmSpec = `{"ociVersion":"1.0.0",
"process":{"terminal":false,"user":{"uid":0,"gid":0,"additionalGids":[0]},"args":["x"],"env":["A=B"],"cwd":"/",
 "capabilities":{"bounding":["CAP_KILL"],"effective":["CAP_KILL"],"permitted":["CAP_KILL"]},
 "rlimits":[{"type":"RLIMIT_NOFILE","hard":1,"soft":1}],"noNewPrivileges":true,"apparmorProfile":"p","oomScoreAdj":0},
"root":{"path":"rootfs","readonly":false},"hostname":"h",
"mounts":[{"destination":"/proc","type":"proc","source":"proc","options":["nosuid"]}],
"hooks":{"createRuntime":[{"path":"/x","args":["x"]}]},
"annotations":{"a":"b"},
"linux":{"uidMappings":[{"containerID":0,"hostID":0,"size":1}],"gidMappings":[{"containerID":0,"hostID":0,"size":1}],
 "sysctl":{"kernel.msgmni":"1"},
 "resources":{"devices":[{"allow":false,"access":"rwm"}],"memory":{"limit":1,"swap":1},"cpu":{"shares":1,"quota":1,"period":1},
  "pids":{"limit":1},"blockIO":{"weight":1},"hugepageLimits":[{"pageSize":"2MB","limit":1}],"unified":{"a":"b"}},
 "cgroupsPath":"/x","namespaces":[{"type":"pid"},{"type":"ipc","path":"/x"}],
 "devices":[{"path":"/dev/x","type":"c","major":1,"minor":1}],
 "seccomp":{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"architectures":["SCMP_ARCH_X86_64"],"listenerPath":"/x",
  "syscalls":[{"names":["semop"],"action":"SCMP_ACT_NOTIFY","errnoRet":1,"args":[{"index":0,"value":1,"valueTwo":0,"op":"SCMP_CMP_EQ"}]}]},
 "maskedPaths":["/x"],"readonlyPaths":["/y"],"mountLabel":"l"}}`
