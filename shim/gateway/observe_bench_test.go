package gateway_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control"
	ctlserve "github.com/containerd-shim-ipc/containerd-shim-ipc/shim/control/serve"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
)

// BenchmarkGatewaySemopMetrics: the trapped lock/unlock pair of
// BenchmarkGatewaySemop (plain delivery, namespace cache) without and
// with the metrics observer (shim/serve.Metrics), alternating three
// times in one run so that drift hits both; docs/bench-host.md compares
// them.
func BenchmarkGatewaySemopMetrics(b *testing.B) {
	src := func() control.Snapshot { return control.Snapshot{} }
	for round := 1; round <= 3; round++ {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("metrics=%v/round=%d", on, round), func(b *testing.B) {
				out, _ := serveWith(b, harness.NewEnginesByInode(), func(g *gateway.Gateway) {
					g.Defaults = gateway.ListenerOptions{NSFixed: true, IDsFixed: true}
					if on {
						g.SetObserver(ctlserve.NewMetrics(src))
					}
				}, "go:semloop", strconv.Itoa(max(b.N, 1000)))
				b.ReportMetric(childNs(b, out)/2, "ns/call")
			})
		}
	}
}
