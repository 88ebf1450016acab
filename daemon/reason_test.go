package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// rejectingRegistry lists one good service and rejects one record with the reason "port", as a
// partner's adapter does with registry.Reason.
type rejectingRegistry struct{}

func (rejectingRegistry) Run(ctx context.Context, sink registry.Sink) error {
	rec := registry.NewReconciler(sink)
	rec.Set(model.Service{Namespace: "default", Name: "web", Hosts: []string{"web.default.internal"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}}})
	rec.Reject("catalog#2 (default/api)", registry.Reason("port", fmt.Errorf("port %d out of range", 70000)))
	rec.Flush()
	<-ctx.Done()
	return ctx.Err()
}

// TestRejectionReasonReachesMetrics: the reason a partner's adapter gives a rejection with
// registry.Reason is the reason label of the core's galleon_registry_records_rejected_total.
func TestRejectionReasonReachesMetrics(t *testing.T) {
	_, httpAddr := daemontest.Start(t, "galleon-reasontest", "reasontest",
		func(daemon.Env) (registry.Registry, error) { return rejectingRegistry{}, nil }, 10*time.Second)
	const want = `galleon_registry_records_rejected_total{reason="port"} 1`
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if body = string(b); strings.Contains(body, want) {
			return
		}
	}
	var rejected []string
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, "records_rejected") {
			rejected = append(rejected, line)
		}
	}
	t.Fatalf("/metrics has no %s; its rejection lines:\n%s", want, strings.Join(rejected, "\n"))
}
