package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
	"github.com/galleon-mesh/galleon/registry/registrytest"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// firstSotW opens a SotW stream for ServiceEntries to addr and returns its first response.
func firstSotW(t *testing.T, ctx context.Context, addr string) *xdsclient.Response {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode("ha-compare"), []string{seTypeURL})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("%s: %v", addr, err)
	}
	return resp
}

// sameResponse says how two replicas' responses differ ("" when their versions and every
// resource's bytes are equal).
func sameResponse(a, b *xdsclient.Response) string {
	if a.VersionInfo != b.VersionInfo {
		return fmt.Sprintf("version_info %q and %q", a.VersionInfo, b.VersionInfo)
	}
	if len(a.Raw.Resources) != len(b.Raw.Resources) {
		return fmt.Sprintf("%d and %d resources", len(a.Raw.Resources), len(b.Raw.Resources))
	}
	for i := range a.Raw.Resources {
		if !bytes.Equal(a.Raw.Resources[i].GetValue(), b.Raw.Resources[i].GetValue()) {
			return fmt.Sprintf("resource %d (%s) differs in its bytes:\n%+v\n%+v", i, a.Resources[i].Key(), a.Resources[i], b.Resources[i])
		}
	}
	return ""
}

// TestReplicaSwitchToIstiod runs two replicas of galleon-file on one registry. They serve the
// same version and byte-identical resources, before and after a change. istiod reads them
// through one address (a TCP proxy standing for a Kubernetes Service); the replica it reads is
// killed and the address moves to the other. istiod must hold every ServiceEntry throughout,
// and the switch must cost it no full push: the other replica serves the same versions, so
// istiod finds nothing changed. What the switch costs (time without a source, pushes) is logged
// for docs/reliability.md.
func TestReplicaSwitchToIstiod(t *testing.T) { istiod.ForEachRelease(t, testReplicaSwitch) }

func testReplicaSwitch(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	keys := copyExamples(t, dir)
	reg := fileRegistry{}
	for i := range 100 {
		reg.Services = append(reg.Services, fileService{
			Name: fmt.Sprintf("svc-%03d", i), Namespace: "ha", Hosts: []string{fmt.Sprintf("svc-%03d.ha.internal", i)},
			Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{
				{ID: "a", Address: fmt.Sprintf("10.20.%d.1", i)},
				{ID: "b", Address: fmt.Sprintf("10.20.%d.2", i)},
			},
		})
		keys = append(keys, fmt.Sprintf("ha/svc-%03d", i))
	}
	writeRegistryFile(t, dir, "ha.yaml", reg)
	a := startGalleon(t, bin, "--file-dir", dir, "--debounce-quiet", "20ms")
	b := startGalleon(t, bin, "--file-dir", dir, "--debounce-quiet", "20ms")

	// 1. Byte-identical, before and after a change.
	compare := func(when, notVersion string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ra, rb := firstSotW(t, ctx, a.Addr), firstSotW(t, ctx, b.Addr)
			diff := sameResponse(ra, rb)
			if diff == "" && len(ra.Resources) == len(keys) && ra.VersionInfo != notVersion {
				t.Logf("%s: both replicas serve version %s, %d resources, identical bytes", when, ra.VersionInfo, len(ra.Resources))
				return ra.VersionInfo
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the replicas differ: %s (%d resources, want %d)", when, diff, len(ra.Resources), len(keys))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	v := compare("at start", "")
	// Each replica allocated the same address to each host (docs/vips.md): one per service, all
	// distinct, from the default range.
	seen := map[string]string{}
	for _, r := range firstSotW(t, ctx, a.Addr).Resources {
		var se networking.ServiceEntry
		if err := r.Body.UnmarshalTo(&se); err != nil {
			t.Fatal(err)
		}
		if len(se.Addresses) != 1 || !netip.MustParsePrefix("240.0.0.0/4").Contains(netip.MustParseAddr(se.Addresses[0])) {
			t.Errorf("%s: addresses %v, want one allocated from 240.0.0.0/4", r.Key(), se.Addresses)
			continue
		}
		if other, dup := seen[se.Addresses[0]]; dup {
			t.Errorf("%s and %s share %s", r.Key(), other, se.Addresses[0])
		}
		seen[se.Addresses[0]] = r.Key()
	}
	reg.Services[7].Instances[1].Address = "10.21.7.2"
	writeRegistryFile(t, dir, "ha.yaml", reg)
	compare("after an instance moved", v)

	// 2. istiod on replica a, through the address both stand behind.
	proxy := registrytest.NewProxy(t, a.Addr)
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{proxy.Addr()}})
	all := func(ses map[string]serviceEntry) string {
		var missing []string
		for _, k := range keys {
			if _, ok := ses[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return fmt.Sprintf("%d ServiceEntries missing, e.g. %s", len(missing), missing[0])
		}
		return ""
	}
	waitForServiceEntries(t, ctx, ist, "initial state", all)
	before, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	streamsOn := func(g *galleon) float64 {
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			return -1
		}
		n, _ := metricSum(fams, "galleon_xds_streams", map[string]string{"protocol": "sotw"})
		return n
	}
	if n := streamsOn(b); n != 0 {
		t.Fatalf("replica b has %v SotW streams before the switch, want 0", n)
	}

	// 3. The switch: a killed, the address moved to b.
	killed := time.Now()
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proxy.Retarget(b.Addr)
	var looks int
	var reconnected time.Duration
	for time.Since(killed) < 30*time.Second {
		ses, err := serviceEntries(ctx, ist)
		if err != nil {
			t.Fatalf("reading istiod during the switch: %v", err)
		}
		if msg := all(ses); msg != "" {
			t.Fatalf("%v after replica a was killed, %d looks in: istiod holds less than before: %s", time.Since(killed), looks, msg)
		}
		looks++
		if reconnected == 0 && streamsOn(b) >= 1 {
			reconnected = time.Since(killed)
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if reconnected == 0 {
		t.Fatalf("istiod did not open a stream to replica b within 30s of the switch")
	}
	// Let istiod take b's first response in and debounce it (100 ms); then count.
	time.Sleep(2 * time.Second)
	ses, err := serviceEntries(ctx, ist)
	if err != nil {
		t.Fatal(err)
	}
	if msg := all(ses); msg != "" {
		t.Fatalf("after the switch: %s", msg)
	}
	after, err := ist.PushCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica switch: istiod reconnected to b %v after a was killed (%d looks, every ServiceEntry held); full pushes +%v, debounced pushes +%v, config updates +%v",
		reconnected.Round(time.Millisecond), looks, after.FullPushes-before.FullPushes, after.Debounces-before.Debounces, after.ConfigUpdates-before.ConfigUpdates)
	if d := after.FullPushes - before.FullPushes; d != 0 {
		t.Errorf("the switch to an identical replica caused %v full pushes in istiod, want 0", d)
	}

	// 4. An endpoint-only change, now from b, is still EDS-only in istiod: b's resources must
	// carry what istiod holds from a, create_time included (the same bytes from either replica).
	reg.Services[9].Instances[1].Address = "10.21.9.2"
	writeRegistryFile(t, dir, "ha.yaml", reg)
	waitForServiceEntries(t, ctx, ist, "an endpoint change served by b", func(ses map[string]serviceEntry) string {
		if got := ses["ha/svc-009"].endpoints(); !slices.Equal(got, []string{"10.20.9.1", "10.21.9.2"}) {
			return "ha/svc-009 endpoints " + strings.Join(got, ",")
		}
		return ""
	})
	changed, err := ist.WaitPushed(ctx, after)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("an endpoint change from b after the switch: full pushes +%v, EDS updates +%v", changed.FullPushes-after.FullPushes, changed.EDSUpdates-after.EDSUpdates)
	if d := changed.FullPushes - after.FullPushes; d != 0 {
		t.Errorf("an endpoint-only change served by replica b after the switch caused %v full pushes, want 0", d)
	}
}
