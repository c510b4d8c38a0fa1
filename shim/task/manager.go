package task

import (
	"context"
	"io"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	"github.com/containerd/containerd/v2/pkg/shim"
)

// RuntimeName is the runtime type containerd knows the shim by.
const RuntimeName = "io.containerd.ipc.v2"

// Manager is runc's shim manager (start, stop, grouping of a pod's
// containers into one shim process) under this runtime's name, with the
// runtime options normalised for info and the shim's own version in it.
type Manager struct {
	shim.Shim
	version Version
}

// Version is the shim binary's version, for the runtime info.
type Version struct {
	Version, Revision string
	// Containerd is the version of the containerd module linked in,
	// whose runc shim this is.
	Containerd string
}

// ContainerdAnnotation is the runtime info's annotation that carries the
// version of the containerd module the shim links (the info's Version
// is the shim's own).
const ContainerdAnnotation = "io.containerd.ipc.v2.containerd-version"

// NewManager returns the shim manager of a binary of version v.
func NewManager(v Version) shim.Shim {
	return Manager{Shim: manager.NewShimManager(RuntimeName), version: v}
}

// Info reports the runtime's info, accepting CRI's generic options: runc's
// (its features, options), with the shim's version in place of the
// containerd version runc's shim reports.
func (m Manager) Info(ctx context.Context, optionsR io.Reader) (*types.RuntimeInfo, error) {
	r, err := runcOptionsReader(optionsR)
	if err != nil {
		return nil, err
	}
	info, err := m.Shim.Info(ctx, r)
	if err != nil || m.version.Version == "" {
		return info, err
	}
	info.Version = &types.RuntimeVersion{Version: m.version.Version, Revision: m.version.Revision}
	if m.version.Containerd != "" {
		if info.Annotations == nil {
			info.Annotations = map[string]string{}
		}
		info.Annotations[ContainerdAnnotation] = m.version.Containerd
	}
	return info, nil
}
