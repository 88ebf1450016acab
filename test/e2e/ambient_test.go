package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
	"github.com/galleon-mesh/galleon/test/ztunnel"
)

// TestAmbientThroughKubernetesOutput is the ambient proof: istiod in ambient mode builds
// ztunnel's view only from Kubernetes informers, so galleon-file writes its services to a real
// API server (--output-kubernetes) and a ztunnel's view of istiod (the workload API over Delta
// xDS, as ztunnel subscribes) must show each service with its VIP and its instances as
// workloads; an endpoint change must reach that view without a full push, and a removal must
// remove it. Both outputs: endpoints inline (serviceentry), and a WorkloadEntry per instance
// that the ServiceEntry selects (workloadentry).
func TestAmbientThroughKubernetesOutput(t *testing.T) {
	istiod.ForEachRelease(t, func(t *testing.T, rel istiod.Release) {
		for _, output := range []string{"serviceentry", "workloadentry"} {
			t.Run(output, func(t *testing.T) { testAmbient(t, rel, output) })
		}
	})
}

func testAmbient(t *testing.T, rel istiod.Release, output string) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, client := istioAPIServer(t, ctx, rel)
	if _, err := client.ApplyYAML(ctx, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {istio.io/dataplane-mode: ambient}}\n"), "galleon-e2e"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg := fileRegistry{Services: []fileService{
		{Name: "orders", Namespace: "shop", Hosts: []string{"orders.vms.internal"},
			Ports:     []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{{ID: "orders-1", Address: "10.9.0.1"}, {ID: "orders-2", Address: "10.9.0.2"}}},
		{Name: "ledger", Namespace: "shop", Hosts: []string{"ledger.vms.internal"},
			Ports:     []filePort{{Number: 5432, Protocol: "TCP", Name: "tcp-pg"}},
			Instances: []fileInstance{{ID: "ledger-1", Address: "10.9.1.1"}}},
	}}
	writeRegistryFile(t, dir, "vms.yaml", reg)
	g := startGalleon(t, bin, "--file-dir", dir, "--output", output, "--output-kubernetes", "--kubeconfig", c.Kubeconfig,
		"--kubernetes-removal-delay", "1s", "--removal-hold", "0")
	ist := istiod.Start(t, istiod.Options{
		Release: rel, Kubeconfig: c.Kubeconfig, ConfigSources: []string{"k8s://"},
		Env: []string{"PILOT_ENABLE_AMBIENT=true"},
	})
	zt, err := ztunnel.Watch(ctx, ist.GRPCAddr, "10.99.0.7")
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, cond func(v *ztunnel.View) (bool, string)) *ztunnel.View {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
		defer wcancel()
		v, err := zt.Wait(wctx, cond)
		if err != nil {
			t.Fatalf("%s: a ztunnel's view: %v\n%s", what, err, g.Tail(20))
		}
		return v
	}
	serves := func(host string, eps ...string) func(v *ztunnel.View) (bool, string) {
		return func(v *ztunnel.View) (bool, string) {
			s, ok := v.Service(host)
			if !ok {
				return false, fmt.Sprintf("no service %s (services %v)", host, slices.Sorted(maps.Keys(v.Services)))
			}
			vips := ztunnel.VIPs(s)
			if len(vips) == 0 {
				return false, fmt.Sprintf("%s has no VIP", host)
			}
			if got := v.Endpoints(s); !slices.Equal(got, eps) {
				return false, fmt.Sprintf("%s workloads %v, want %v", host, got, eps)
			}
			return true, ""
		}
	}
	v := wait("Galleon's services", func(v *ztunnel.View) (bool, string) {
		for _, cond := range []func(*ztunnel.View) (bool, string){serves("orders.vms.internal", "10.9.0.1", "10.9.0.2"), serves("ledger.vms.internal", "10.9.1.1")} {
			if ok, why := cond(v); !ok {
				return false, why
			}
		}
		return true, ""
	})
	if output == "workloadentry" {
		wes, err := client.Dynamic.Resource(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "workloadentries"}).
			Namespace("shop").List(ctx, metav1.ListOptions{LabelSelector: "galleon.io/owner=galleon-file"})
		if err != nil {
			t.Fatal(err)
		}
		if len(wes.Items) != 3 {
			t.Errorf("the API server holds %d WorkloadEntries of galleon-file in shop, want 3 (one per instance)", len(wes.Items))
		}
	}
	orders, _ := v.Service("orders.vms.internal")
	for _, vip := range ztunnel.VIPs(orders) {
		if a, err := netip.ParseAddr(vip); err != nil || !netip.MustParsePrefix("240.0.0.0/4").Contains(a) {
			t.Errorf("orders' VIP %s is not one Galleon allocates (240.0.0.0/4)", vip)
		}
	}
	t.Logf("a ztunnel sees orders at %v, ports %v, workloads %v", ztunnel.VIPs(orders), orders.GetPorts(), v.Endpoints(orders))

	// A sidecar (a pod outside the ambient mesh) reads the same resources: the VIP routes
	// to orders' cluster, whose endpoints are the instances.
	cluster := "outbound|8080||orders.vms.internal"
	var routed string
	if err := ist.WaitFor(ctx, func() (bool, error) {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		defer fcancel()
		sv, err := sidecar.Fetch(fctx, ist.GRPCAddr, sidecarPod())
		if err != nil {
			return false, err
		}
		d, err := sv.HTTP(ztunnel.VIPs(orders)[0], 8080, "orders.vms.internal")
		if err != nil || d.Cluster != cluster {
			routed = fmt.Sprintf("%s, %v", d, err)
			return false, nil
		}
		eps, err := sv.Endpoints(cluster)
		routed = fmt.Sprintf("%s: %v %v", d, eps, err)
		return err == nil && slices.Equal(eps, []string{"10.9.0.1:8080", "10.9.0.2:8080"}), nil
	}); err != nil {
		t.Fatalf("a sidecar's view of orders: %v (last: %s)", err, routed)
	}

	// An endpoint change: the ztunnel's view follows, without a full push.
	before, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	reg.Services[0].Instances[1].Address = "10.9.0.3"
	writeRegistryFile(t, dir, "vms.yaml", reg)
	wait("orders' endpoint moved", serves("orders.vms.internal", "10.9.0.1", "10.9.0.3"))
	after, err := ist.WaitPushed(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("endpoint change: istiod's pushes %+v -> %+v", before, after)
	if full := after.FullPushes - before.FullPushes; full != 0 {
		t.Errorf("an endpoint change caused %v full pushes in ambient mode, want 0", full)
	}

	// Removal removes it from the view.
	reg.Services = reg.Services[:1]
	writeRegistryFile(t, dir, "vms.yaml", reg)
	wait("ledger removed", func(v *ztunnel.View) (bool, string) {
		if _, ok := v.Service("ledger.vms.internal"); ok {
			return false, "ledger.vms.internal still there"
		}
		if ok, why := serves("orders.vms.internal", "10.9.0.1", "10.9.0.3")(v); !ok {
			return false, why
		}
		return true, ""
	})
}
