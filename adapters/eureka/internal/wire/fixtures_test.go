package wire

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// readFixture decodes testdata/name, in the format its extension says.
func readFixture(t *testing.T, name string) *Applications {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	f := FormatJSON
	if filepath.Ext(name) == ".xml" {
		f = FormatXML
	}
	a, err := DecodeBytes(b, f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return a
}

// The testdata/netflix-* fixtures were written by hand from Netflix's codecs
// (EurekaJacksonCodec for JSON, XStream's Converters for XML, Jettison for the old JSON), not
// from this decoder. These are what they say, also written by hand.
func amazon(zone, id, ip string) DataCenterInfo {
	return DataCenterInfo{Name: "Amazon", Class: "com.netflix.appinfo.AmazonInfo",
		Metadata: map[string]string{"availability-zone": zone, "instance-id": id, "local-ipv4": ip}}
}

var myOwn = DataCenterInfo{Name: "MyOwn", Class: "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"}

func lease(reg, renew, evict, up int64) LeaseInfo {
	return LeaseInfo{RenewalIntervalInSecs: 30, DurationInSecs: 90, RegistrationTimestamp: reg,
		LastRenewalTimestamp: renew, EvictionTimestamp: evict, ServiceUpTimestamp: up}
}

var (
	payments1 = Instance{
		InstanceID: "payments-1", App: "PAYMENTS", IPAddr: "10.1.0.11", HostName: "ip-10-1-0-11.ec2.internal",
		Port: Port{8080, true}, SecurePort: Port{8443, true}, VIPAddress: "payments", SecureVIPAddress: "payments-secure",
		Status: StatusUp, OverriddenStatus: StatusUnknown,
		Metadata:             map[string]string{"management.port": "8081", "instance_name": "payments_blue"},
		DataCenterInfo:       amazon("us-east-1a", "i-0a1", "10.1.0.11"),
		LeaseInfo:            lease(1700000000000, 1700000090000, 0, 1700000000500),
		LastUpdatedTimestamp: 1700000000600, LastDirtyTimestamp: 1700000000400, ActionType: ActionAdded,
	}
	payments2 = Instance{
		InstanceID: "payments-2", App: "PAYMENTS", IPAddr: "10.1.0.12", HostName: "ip-10-1-0-12.ec2.internal",
		Port: Port{8080, true}, SecurePort: Port{443, false}, VIPAddress: "payments", SecureVIPAddress: "payments-secure",
		Status: StatusDown, OverriddenStatus: StatusUnknown,
		Metadata:             map[string]string{"management.port": "8081"},
		DataCenterInfo:       amazon("us-east-1b", "i-0a2", "10.1.0.12"),
		LeaseInfo:            lease(1700000001000, 1700000091000, 0, 1700000001500),
		LastUpdatedTimestamp: 1700000061000, LastDirtyTimestamp: 1700000060900, ActionType: ActionModified,
	}
	payments3 = Instance{
		InstanceID: "payments-3", App: "PAYMENTS", IPAddr: "10.1.0.13", HostName: "ip-10-1-0-13.ec2.internal",
		Port: Port{8080, true}, SecurePort: Port{443, false}, VIPAddress: "payments", SecureVIPAddress: "payments-secure",
		Status: StatusOutOfService, OverriddenStatus: StatusOutOfService,
		DataCenterInfo:       amazon("us-east-1c", "i-0a3", "10.1.0.13"),
		LeaseInfo:            lease(1700000002000, 1700000092000, 0, 1700000002500),
		LastUpdatedTimestamp: 1700000070000, LastDirtyTimestamp: 1700000002400, ActionType: ActionModified,
	}
	catalog1 = Instance{
		InstanceID: "catalog-1", App: "CATALOG", IPAddr: "10.2.0.1", HostName: "catalog-1.internal",
		Port: Port{9090, true}, SecurePort: Port{443, false}, VIPAddress: "catalog",
		Status: StatusUp, OverriddenStatus: StatusUnknown, DataCenterInfo: myOwn,
		LeaseInfo:            lease(1700000003000, 1700000093000, 0, 1700000003500),
		LastUpdatedTimestamp: 1700000003600, LastDirtyTimestamp: 1700000003400, ActionType: ActionAdded,
	}
	catalog2 = Instance{
		InstanceID: "catalog-2", App: "CATALOG", IPAddr: "10.2.0.2", HostName: "catalog-2.internal",
		Port: Port{9090, true}, SecurePort: Port{443, false}, VIPAddress: "catalog",
		Status: StatusStarting, OverriddenStatus: StatusUnknown, DataCenterInfo: myOwn,
		Metadata:             map[string]string{"zone": "zone-b", "protocol": "grpc"},
		LeaseInfo:            lease(1700000004000, 1700000094000, 0, 0),
		LastUpdatedTimestamp: 1700000004600, LastDirtyTimestamp: 1700000004400, ActionType: ActionAdded,
	}
	// legacy1 has no instanceId (a client before Eureka 1.1.153): its hostName stands for it.
	legacy1 = Instance{
		InstanceID: "legacy-host.example.com", App: "LEGACY", IPAddr: "10.3.0.1", HostName: "legacy-host.example.com",
		Port: Port{7001, true}, SecurePort: Port{7002, false}, VIPAddress: "legacy",
		Status: StatusUp, OverriddenStatus: StatusUnknown, DataCenterInfo: myOwn,
		LeaseInfo:            lease(1700000005000, 1700000095000, 0, 1700000005500),
		LastUpdatedTimestamp: 1700000005600, LastDirtyTimestamp: 1700000005400, ActionType: ActionAdded,
	}
	netflixApps = &Applications{
		VersionsDelta: 1,
		AppsHashcode:  "DOWN_1_OUT_OF_SERVICE_1_STARTING_1_UP_3_",
		Apps: []Application{
			{Name: "PAYMENTS", Instances: []Instance{payments1, payments2, payments3}},
			{Name: "CATALOG", Instances: []Instance{catalog1, catalog2}},
			{Name: "LEGACY", Instances: []Instance{legacy1}},
		},
	}
)

// with returns in changed by f (a copy: fixtures stay as they are).
func with(in Instance, f func(*Instance)) Instance {
	f(&in)
	return in
}

func TestNetflixListingFixtures(t *testing.T) {
	for _, name := range []string{"netflix-apps.json", "netflix-apps.xml"} {
		t.Run(name, func(t *testing.T) {
			got := readFixture(t, name)
			if !reflect.DeepEqual(got, netflixApps) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, netflixApps)
			}
			if h := Hashcode(got); h != got.AppsHashcode {
				t.Errorf("Hashcode %q, the listing's apps__hashcode %q", h, got.AppsHashcode)
			}
		})
	}
	// Netflix's older XStream JSON (Jettison): every value a string, one application and one
	// instance written as objects, overriddenstatus in lower case.
	t.Run("netflix-apps-xstream.json", func(t *testing.T) {
		got := readFixture(t, "netflix-apps-xstream.json")
		want := &Applications{VersionsDelta: 7, AppsHashcode: "UP_1_", Apps: []Application{{Name: "LEGACY", Instances: []Instance{legacy1}}}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
		}
		if h := Hashcode(got); h != "UP_1_" {
			t.Errorf("Hashcode %q", h)
		}
	})
}

func TestNetflixDeltaFixtures(t *testing.T) {
	wantState := &Applications{
		VersionsDelta: 5,
		AppsHashcode:  "UP_6_",
		Apps: []Application{
			{Name: "PAYMENTS", Instances: []Instance{payments1, with(payments2, func(in *Instance) {
				in.Status, in.LeaseInfo.LastRenewalTimestamp = StatusUp, 1700000121000
				in.LastUpdatedTimestamp, in.LastDirtyTimestamp = 1700000120000, 1700000119900
			})}},
			{Name: "CATALOG", Instances: []Instance{catalog1, with(catalog2, func(in *Instance) {
				in.Status, in.ActionType = StatusUp, ActionModified
				in.LeaseInfo.LastRenewalTimestamp, in.LeaseInfo.ServiceUpTimestamp = 1700000124000, 1700000130000
				in.LastUpdatedTimestamp, in.LastDirtyTimestamp = 1700000130000, 1700000129900
			})}},
			{Name: "LEGACY", Instances: []Instance{legacy1}},
			{Name: "SEARCH", Instances: []Instance{{
				InstanceID: "search-1", App: "SEARCH", IPAddr: "10.4.0.1", HostName: "search-1.internal",
				Port: Port{8983, true}, SecurePort: Port{443, false}, VIPAddress: "search",
				Status: StatusUp, OverriddenStatus: StatusUnknown, DataCenterInfo: myOwn,
				Metadata:             map[string]string{"protocol": "http"},
				LeaseInfo:            lease(1700000126000, 1700000126000, 0, 1700000126500),
				LastUpdatedTimestamp: 1700000126600, LastDirtyTimestamp: 1700000126400, ActionType: ActionAdded,
			}}},
		},
	}
	for _, listing := range []string{"netflix-apps.json", "netflix-apps.xml"} {
		for _, deltaName := range []string{"netflix-delta.json", "netflix-delta.xml"} {
			t.Run(listing+"+"+deltaName, func(t *testing.T) {
				cur := readFixture(t, listing)
				delta := readFixture(t, deltaName)
				next, res := ApplyDelta(cur, delta)
				if !res.Reconciled || res.Hashcode != "UP_6_" {
					t.Errorf("Reconciled %v, Hashcode %q; want true, UP_6_", res.Reconciled, res.Hashcode)
				}
				if want := []string{"CATALOG", "PAYMENTS", "SEARCH"}; !slices.Equal(res.Changed, want) {
					t.Errorf("Changed %v, want %v (LEGACY's ADDED replays what it holds)", res.Changed, want)
				}
				if res.Added != 2 || res.Modified != 2 || res.Deleted != 1 || len(res.Skipped)+len(res.Unapplied) != 0 {
					t.Errorf("result %+v", res)
				}
				if !reflect.DeepEqual(next, wantState) {
					t.Errorf("after the delta\n%+v\nwant\n%+v", next, wantState)
				}
				if !reflect.DeepEqual(cur, netflixApps) {
					t.Error("ApplyDelta changed the registry it was given")
				}
				// The delta again (a server lists every change of its window in every delta):
				// nothing changes, still reconciled.
				again, res2 := ApplyDelta(next, delta)
				if !res2.Reconciled || len(res2.Changed) != 0 || len(Diff(next, again)) != 0 {
					t.Errorf("the delta applied twice: %+v", res2)
				}
			})
		}
	}

	// A registry that missed a change does not reconcile: catalog-1's registration never
	// arrived here.
	stale := readFixture(t, "netflix-apps.json")
	stale.Apps[1].Instances = stale.Apps[1].Instances[1:]
	_, res := ApplyDelta(stale, readFixture(t, "netflix-delta.json"))
	if res.Reconciled || res.Hashcode != "UP_5_" {
		t.Errorf("stale registry: Reconciled %v, Hashcode %q; want false, UP_5_", res.Reconciled, res.Hashcode)
	}
}
