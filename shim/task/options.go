package task

import (
	"bytes"
	"fmt"
	"io"
	"os"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// RuncOptions returns the runtime options as runc's shim wants them.
//
// containerd's CRI plugin sends runc's options (runc options.Options) only
// to runtime_type io.containerd.runc.v2; to any other runtime type, ours
// included, it sends runtimeoptions.Options, the generic envelope with the
// runtime's options table as TOML (ConfigBody) or a file (ConfigPath).
// runc's shim type-asserts options.Options and would panic on the
// envelope, so it is decoded here: the TOML keys are runc's option names
// (BinaryName, Root, SystemdCgroup, ...), as under a runc runtime entry.
func RuncOptions(o *anypb.Any) (*anypb.Any, error) {
	if o == nil || (o.GetTypeUrl() == "" && len(o.GetValue()) == 0) {
		return o, nil
	}
	v, err := typeurl.UnmarshalAny(o)
	if err != nil {
		return nil, fmt.Errorf("runtime options of type %q cannot be decoded: %w", o.GetTypeUrl(), err)
	}
	switch v := v.(type) {
	case *runcoptions.Options:
		return o, nil
	case *runtimeoptions.Options:
		ro := &runcoptions.Options{}
		body := v.GetConfigBody()
		if p := v.GetConfigPath(); p != "" {
			if body, err = os.ReadFile(p); err != nil {
				return nil, fmt.Errorf("runtime options: ConfigPath: %w", err)
			}
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := toml.Unmarshal(body, ro); err != nil {
				return nil, fmt.Errorf("runtime options: the options table of the runtime entry is not runc's options (BinaryName, Root, SystemdCgroup, ...): %w", err)
			}
		}
		return typeurl.MarshalAnyToProto(ro)
	default:
		return nil, fmt.Errorf("runtime options of type %T are not supported: use runc's options (io.containerd.runc.v1.Options) or none", v)
	}
}

// runcOptionsReader is RuncOptions for the serialized Any that containerd
// passes to the shim's info command on stdin.
func runcOptionsReader(r io.Reader) (io.Reader, error) {
	data, err := io.ReadAll(r)
	if err != nil || len(data) == 0 {
		return bytes.NewReader(data), err
	}
	var a anypb.Any
	if err := proto.Unmarshal(data, &a); err != nil {
		return bytes.NewReader(data), nil // let runc's manager report it
	}
	conv, err := RuncOptions(&a)
	if err != nil {
		return nil, err
	}
	out, err := proto.Marshal(conv)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(out), nil
}
