package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/nacosclient"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// dubboParams are the URL parameters a Dubbo 2.7 provider of greetingIface registers with (as
// dubboProviderOf writes them), interface included.
func dubboParams() url.Values {
	return url.Values{
		"anyhost": {"true"}, "application": {"greeter"}, "deprecated": {"false"}, "dubbo": {"2.0.2"},
		"dynamic": {"true"}, "generic": {"false"}, "interface": {greetingIface}, "methods": {"greet,greetAsync"},
		"pid": {"4242"}, "release": {"2.7.23"}, "side": {"provider"}, "timestamp": {"1700000000000"},
		"version": {greetingVersion}, "weight": {"100"},
	}
}

// dubboNacosService is the Nacos service Dubbo's NacosRegistry registers a provider of iface
// under: "<category>:<interface>:<version>:<group>" (NacosRegistry.getServiceName: category +
// ":" + URL.getColonSeparatedKey(), empty version and group left empty), in the registry URL's
// group, DEFAULT_GROUP unless configured.
func dubboNacosService(iface, version, group string) string {
	return "providers:" + iface + ":" + version + ":" + group
}

// dubboNacosInstance is the instance NacosRegistry.createInstance makes of a provider URL: its
// IP and port, metadata = the URL's parameters plus category, protocol and path; weight,
// health, enabled and ephemeral left to the Nacos client's defaults (1.0, true, true, true).
func dubboNacosInstance(ip string, port int, iface string, params url.Values) nacosclient.Instance {
	md := map[string]string{}
	for k, v := range params {
		md[k] = v[0]
	}
	md["category"] = "providers"
	md["protocol"] = "dubbo"
	md["path"] = iface
	return nacosclient.Instance{IP: ip, Port: uint64(port), Weight: 1, Metadata: md}
}

// servedEntry is one ServiceEntry as an adapter serves it over MCP.
type servedEntry struct {
	key    string
	labels map[string]string
	spec   *networking.ServiceEntry
}

// served reads what the adapter at addr serves (one SotW response) until ok accepts it.
func served(t *testing.T, ctx context.Context, what, addr string, ok func(map[string]servedEntry) string) map[string]servedEntry {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	wrong := "nothing read yet"
	for {
		resp := firstSotW(t, ctx, addr)
		out := map[string]servedEntry{}
		for _, r := range resp.Resources {
			msg, err := r.Spec()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			se, isSE := msg.(*networking.ServiceEntry)
			if !isSE {
				t.Fatalf("%s: resource %s is a %T", what, r.Key(), msg)
			}
			out[r.Key()] = servedEntry{key: r.Key(), labels: r.Labels, spec: se}
		}
		if wrong = ok(out); wrong == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s still wrong after 30 s: %s", what, addr, wrong)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// entryWith checks that ses holds key with endpoints ips and returns it.
func entryWith(ses map[string]servedEntry, key string, ips ...string) (servedEntry, string) {
	se, ok := ses[key]
	if !ok {
		keys := slices.Sorted(maps.Keys(ses))
		return servedEntry{}, fmt.Sprintf("%s not served (served: %v)", key, keys)
	}
	var got []string
	for _, e := range se.spec.GetEndpoints() {
		got = append(got, e.GetAddress())
	}
	slices.Sort(got)
	if !slices.Equal(got, ips) {
		return servedEntry{}, fmt.Sprintf("%s has endpoints %v, want %v", key, got, ips)
	}
	return se, ""
}

// sameEntry reports every way the ServiceEntries z (from ZooKeeper) and n (from Nacos) of one
// Dubbo service differ in what a mesh sees: name, hosts, ports, resolution, each endpoint's
// ports and the labels listed; other labels are logged.
func sameEntry(t *testing.T, what string, z, n servedEntry, labels ...string) {
	t.Helper()
	if z.key != n.key {
		t.Errorf("%s: the ServiceEntry names differ: %s from ZooKeeper, %s from Nacos", what, z.key, n.key)
	}
	if !slices.Equal(z.spec.GetHosts(), n.spec.GetHosts()) {
		t.Errorf("%s: the hosts differ: %v from ZooKeeper, %v from Nacos", what, z.spec.GetHosts(), n.spec.GetHosts())
	}
	portsOf := func(se *networking.ServiceEntry) []string {
		var out []string
		for _, p := range se.GetPorts() {
			out = append(out, fmt.Sprintf("%d/%s/%s", p.GetNumber(), p.GetProtocol(), p.GetName()))
		}
		return out
	}
	if zp, np := portsOf(z.spec), portsOf(n.spec); !slices.Equal(zp, np) {
		t.Errorf("%s: the ports differ: %v from ZooKeeper, %v from Nacos", what, zp, np)
	}
	if z.spec.GetResolution() != n.spec.GetResolution() {
		t.Errorf("%s: the resolutions differ: %v from ZooKeeper, %v from Nacos", what, z.spec.GetResolution(), n.spec.GetResolution())
	}
	byAddr := func(se *networking.ServiceEntry) map[string]*networking.WorkloadEntry {
		out := map[string]*networking.WorkloadEntry{}
		for _, e := range se.GetEndpoints() {
			out[e.GetAddress()] = e
		}
		return out
	}
	ze, ne := byAddr(z.spec), byAddr(n.spec)
	for _, ip := range slices.Sorted(maps.Keys(ze)) {
		zw, nw := ze[ip], ne[ip]
		if !maps.Equal(zw.GetPorts(), nw.GetPorts()) {
			t.Errorf("%s: endpoint %s's ports: %v from ZooKeeper, %v from Nacos", what, ip, zw.GetPorts(), nw.GetPorts())
		}
		for _, k := range labels {
			if zw.GetLabels()[k] == "" || zw.GetLabels()[k] != nw.GetLabels()[k] {
				t.Errorf("%s: endpoint %s's label %s: %q from ZooKeeper, %q from Nacos", what, ip, k, zw.GetLabels()[k], nw.GetLabels()[k])
			}
		}
		var onlyZK, onlyNacos []string
		for k, v := range zw.GetLabels() {
			if nw.GetLabels()[k] != v {
				onlyZK = append(onlyZK, k+"="+v)
			}
		}
		for k, v := range nw.GetLabels() {
			if zw.GetLabels()[k] != v {
				onlyNacos = append(onlyNacos, k+"="+v)
			}
		}
		slices.Sort(onlyZK)
		slices.Sort(onlyNacos)
		t.Logf("%s: endpoint %s: weight %d from ZooKeeper, %d from Nacos; labels only from ZooKeeper %v, only from Nacos %v",
			what, ip, zw.GetWeight(), nw.GetWeight(), onlyZK, onlyNacos)
	}
}

// The Dubbo 3 application of TestDubboZooKeeperAndNacosAlike: instances export the dubbo and
// tri protocols (dubbo.endpoints), as Dubbo 3 writes them.
const (
	dubbo3App       = "demo-provider"
	dubbo3Revision  = "5d8a1b0c2f7e4a9630b1c2d3e4f5a6b7"
	dubbo3Endpoints = `[{"port":20880,"protocol":"dubbo"},{"port":50051,"protocol":"tri"}]`
)

// dubbo3Metadata is the metadata Dubbo 3 writes for an instance of an application
// (ServiceInstanceMetadataUtils and its customizers), in ZooKeeper's payload and as a Nacos
// instance's metadata alike.
func dubbo3Metadata(zone string) map[string]string {
	return map[string]string{
		"dubbo.endpoints":                   dubbo3Endpoints,
		"dubbo.metadata-service.url-params": `{"connections":"1","version":"1.0.0","dubbo":"2.0.2","side":"provider","port":"20880","protocol":"dubbo"}`,
		"dubbo.metadata.revision":           dubbo3Revision,
		"dubbo.metadata.storage-type":       "local",
		"meta-v":                            "1.0.0",
		"timestamp":                         "1700000000000",
		"zone":                              zone,
	}
}

// dubbo3Node is what ZookeeperServiceDiscovery writes at /services/<app>/<ip>:20880 (Curator's
// JsonInstanceSerializer of a ZookeeperInstance).
func dubbo3Node(ip string, md map[string]string) []byte {
	id := ip + ":20880"
	b, err := json.Marshal(map[string]any{
		"name": dubbo3App, "id": id, "address": ip, "port": 20880, "sslPort": nil,
		"payload": map[string]any{
			"@class": "org.apache.dubbo.registry.zookeeper.ZookeeperInstance", "id": id, "name": dubbo3App, "metadata": md,
		},
		"registrationTimeUTC": 1700000000000, "serviceType": "DYNAMIC", "uriSpec": nil, "enabled": true,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// TestDubboZooKeeperAndNacosAlike registers one Dubbo interface and one Dubbo 3 application
// twice, as Dubbo does in each registry: in a real ZooKeeper (the Dubbo 2 layout, znodes under
// /dubbo/<interface>/providers, zktest's DubboWriter; the Dubbo 3 layout, /services/<app>/<ip:port>
// JSON) and in a real Nacos API server (polaris-server) through the official client, as Dubbo's
// NacosRegistry (service "providers:<interface>:<version>:", metadata = the URL's parameters)
// and NacosServiceDiscovery (service <application>, metadata = the instance's) do.
// galleon-zookeeper (one per layout) and galleon-nacos, each on its registry, must serve the same
// ServiceEntries: name, namespace, host, ports, endpoints and the Dubbo labels, so that a Dubbo
// estate moving from ZooKeeper to Nacos keeps its hosts. istiod reading galleon-nacos then gives
// a sidecar the clusters of the ZooKeeper hosts.
func TestDubboZooKeeperAndNacosAlike(t *testing.T) {
	istiod.ForEachRelease(t, testDubboZooKeeperAndNacosAlike)
}

func testDubboZooKeeperAndNacosAlike(t *testing.T, rel istiod.Release) {
	toolcache.RequireRealServers(t, "ZooKeeper and polaris-server (Nacos API)")
	zkBin := galleonBinary(t, "galleon-zookeeper")
	nacosBin := galleonBinary(t, "galleon-nacos")
	zsrv := zktest.Start(t, zktest.Options{TickTime: 500 * time.Millisecond})
	nsrv := nacostest.Start(t, nacostest.Options{})
	t.Cleanup(func() { nsrv.Kill(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	providers := []string{"10.42.0.1", "10.42.0.2"}
	appInstances := []string{"10.43.0.1", "10.43.0.2"}
	zones := map[string]string{"10.43.0.1": "a", "10.43.0.2": "b"}

	// ZooKeeper: the Dubbo 2 layout, ephemeral provider znodes; the Dubbo 3 layout, ephemeral
	// instance znodes.
	zc, _, err := zk.Connect([]string{zsrv.Addr()}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	w := zktest.DubboWriter{Conn: zc, Ephemeral: true}
	for _, ip := range providers {
		if err := w.Register(zktest.DubboProvider{Interface: greetingIface, IP: ip, Port: greetingPort, Params: dubboParams()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/services", "/services/" + dubbo3App} {
		if _, err := zc.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	for _, ip := range appInstances {
		if _, err := zc.Create("/services/"+dubbo3App+"/"+ip+":20880", dubbo3Node(ip, dubbo3Metadata(zones[ip])), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	// Nacos: the same, as NacosRegistry and NacosServiceDiscovery register them (DEFAULT_GROUP,
	// the public namespace: Dubbo's defaults).
	nc := nacosclient.New(t, nacosclient.Options{Servers: []nacosclient.Server{nacosServerAddr(nsrv)}})
	service := dubboNacosService(greetingIface, greetingVersion, "")
	for _, ip := range providers {
		if err := nc.Register("", service, dubboNacosInstance(ip, greetingPort, greetingIface, dubboParams())); err != nil {
			t.Fatal(err)
		}
	}
	for _, ip := range appInstances {
		if err := nc.Register("", dubbo3App, nacosclient.Instance{IP: ip, Port: 20880, Weight: 1, Metadata: dubbo3Metadata(zones[ip])}); err != nil {
			t.Fatal(err)
		}
	}
	waitNacosListed(t, ctx, nsrv, nacostest.Ref{Service: service}, providers...)
	waitNacosListed(t, ctx, nsrv, nacostest.Ref{Service: dubbo3App}, appInstances...)

	// The adapters with their defaults (Istio namespace default, the default Dubbo host
	// templates); galleon-zookeeper reads one layout per process.
	gz := startGalleon(t, zkBin, "--zk-servers", zsrv.Addr(), "--zk-layout", "dubbo", "--debounce-quiet", "20ms")
	gz3 := startGalleon(t, zkBin, "--zk-servers", zsrv.Addr(), "--zk-layout", "dubbo3", "--debounce-quiet", "20ms")
	gn := startGalleon(t, nacosBin, "--nacos-servers", nsrv.HTTPAddr, "--nacos-discovery-interval", "1s", "--debounce-quiet", "20ms")
	// The names are the ones galleon-zookeeper gives (registry/dubbo's ServiceName):
	// TestZooKeeperToIstiod's for the interface, the application's own for Dubbo 3.
	ifaceKey, ifaceHost := "default/"+greetingName(), greetingName()+".default.dubbo"
	appKey, appHost := "default/"+dubbo3App, dubbo3App+".default.dubbo"
	var zIface, zApp, nIface, nApp servedEntry
	served(t, ctx, "galleon-zookeeper (dubbo)", gz.Addr, func(ses map[string]servedEntry) (m string) {
		zIface, m = entryWith(ses, ifaceKey, providers...)
		return m
	})
	served(t, ctx, "galleon-zookeeper (dubbo3)", gz3.Addr, func(ses map[string]servedEntry) (m string) {
		zApp, m = entryWith(ses, appKey, appInstances...)
		return m
	})
	served(t, ctx, "galleon-nacos", gn.Addr, func(ses map[string]servedEntry) (m string) {
		if nIface, m = entryWith(ses, ifaceKey, providers...); m != "" {
			return m
		}
		nApp, m = entryWith(ses, appKey, appInstances...)
		return m
	})
	for _, e := range []struct {
		who  string
		se   servedEntry
		host string
	}{{"galleon-zookeeper's interface", zIface, ifaceHost}, {"galleon-nacos's interface", nIface, ifaceHost},
		{"galleon-zookeeper's application", zApp, appHost}, {"galleon-nacos's application", nApp, appHost}} {
		t.Logf("%s: %s hosts %v ports %v", e.who, e.se.key, e.se.spec.GetHosts(), e.se.spec.GetPorts())
		if !slices.Equal(e.se.spec.GetHosts(), []string{e.host}) {
			t.Errorf("%s %s has hosts %v, want [%s]", e.who, e.se.key, e.se.spec.GetHosts(), e.host)
		}
	}
	sameEntry(t, "Dubbo 2 interface "+greetingIface, zIface, nIface, "application", "version", "side")
	sameEntry(t, "Dubbo 3 application "+dubbo3App, zApp, nApp, "dubbo-revision", "zone")

	// istiod on galleon-nacos: a sidecar gets the clusters of the ZooKeeper hosts, with the
	// instances, on Dubbo's ports.
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{gn.Addr}})
	waitForServiceEntries(t, ctx, ist, "the Dubbo services from Nacos", both(endpointsAre(ifaceKey, providers...), endpointsAre(appKey, appInstances...)))
	expectRoutes(t, ctx, ist, "the Dubbo services from Nacos", []meshRoute{
		{host: ifaceHost, port: greetingPort, endpoints: portEndpoints(greetingPort, providers...)},
		{host: appHost, port: greetingPort, endpoints: portEndpoints(greetingPort, appInstances...)},
		{host: appHost, port: stockTriPort, http: true, endpoints: portEndpoints(stockTriPort, appInstances...)},
	})
}
