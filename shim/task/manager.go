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
// runtime options normalised for info.
type Manager struct{ shim.Shim }

// NewManager returns the shim manager.
func NewManager() shim.Shim { return Manager{manager.NewShimManager(RuntimeName)} }

// Info reports the runtime's info, accepting CRI's generic options.
func (m Manager) Info(ctx context.Context, optionsR io.Reader) (*types.RuntimeInfo, error) {
	r, err := runcOptionsReader(optionsR)
	if err != nil {
		return nil, err
	}
	return m.Shim.Info(ctx, r)
}
