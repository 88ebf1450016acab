package wire

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	goeureka "github.com/ArthurHlt/go-eureka-client/eureka"
)

// TestGoEurekaClientCrossCheck decodes the XML fixtures with github.com/ArthurHlt/go-eureka-client
// v1.1.0's types (the SDK the issue names; it fetches /apps as XML and decodes it with
// encoding/xml) as a second, independent reader: every field it reads right must agree with this
// decoder. It also pins what it reads wrong, which is why the adapter does not decode with it.
func TestGoEurekaClientCrossCheck(t *testing.T) {
	for _, name := range []string{"netflix-apps.xml", "netflix-delta.xml", "polaris-apps.xml", "polaris-delta.xml", "polaris-apps-after.xml"} {
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			var sdk goeureka.Applications
			if err := xml.Unmarshal(body, &sdk); err != nil {
				t.Fatal(err)
			}
			ours := readFixture(t, name)
			if sdk.AppsHashcode != ours.AppsHashcode || int64(sdk.VersionsDelta) != ours.VersionsDelta {
				t.Errorf("SDK: hashcode %q version %d; ours %q %d", sdk.AppsHashcode, sdk.VersionsDelta, ours.AppsHashcode, ours.VersionsDelta)
			}
			n := 0
			for _, app := range sdk.Applications {
				for _, s := range app.Instances {
					n++
					id := s.InstanceID
					if id == "" {
						id = s.HostName // no instanceId: Netflix's getId falls back to hostName
					}
					in := ours.Find(app.Name, id)
					if in == nil {
						t.Errorf("SDK lists %s/%s, we do not", app.Name, id)
						continue
					}
					if s.App != in.App || s.IpAddr != in.IPAddr || s.HostName != in.HostName || s.Status != in.Status ||
						s.VipAddress != in.VIPAddress || s.SecureVipAddress != in.SecureVIPAddress || s.ActionType != in.ActionType ||
						int64(s.LastUpdatedTimestamp) != in.LastUpdatedTimestamp ||
						s.Port == nil || uint32(s.Port.Port) != in.Port.Number || s.Port.Enabled != in.Port.Enabled ||
						s.SecurePort == nil || uint32(s.SecurePort.Port) != in.SecurePort.Number || s.SecurePort.Enabled != in.SecurePort.Enabled ||
						s.DataCenterInfo == nil || s.DataCenterInfo.Name != in.DataCenterInfo.Name || s.DataCenterInfo.Class != in.DataCenterInfo.Class ||
						s.LeaseInfo == nil || int64(s.LeaseInfo.DurationInSecs) != in.LeaseInfo.DurationInSecs ||
						int64(s.LeaseInfo.LastRenewalTimestamp) != in.LeaseInfo.LastRenewalTimestamp {
						t.Errorf("%s/%s: SDK %+v, ours %+v", app.Name, id, s, *in)
					}
					if s.DataCenterInfo != nil && s.DataCenterInfo.Metadata != nil &&
						s.DataCenterInfo.Metadata.AvailabilityZone != in.DataCenterInfo.AvailabilityZone() {
						t.Errorf("%s/%s: zone %q, ours %q", app.Name, id, s.DataCenterInfo.Metadata.AvailabilityZone, in.DataCenterInfo.AvailabilityZone())
					}
					// Metadata: where the SDK's regular expression reads an entry, it must read
					// what we read, unless the key is XStream-escaped or the value has an entity.
					if s.Metadata != nil {
						for k, v := range s.Metadata.Map {
							if strings.Contains(k, "__") || strings.Contains(v, "&") {
								continue // pinned below
							}
							if in.Metadata[k] != v {
								t.Errorf("%s/%s: metadata %s=%q, ours %q", app.Name, id, k, v, in.Metadata[k])
							}
						}
					}
				}
			}
			if n != ours.Servable()+len(ours.Skipped) {
				t.Errorf("SDK reads %d instances, we %d", n, ours.Servable())
			}
		})
	}

	// What it gets wrong. If one of these starts to pass, the SDK has changed.
	sdkInstance := func(name, app, id string) goeureka.InstanceInfo {
		t.Helper()
		body, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var a goeureka.Applications
		if err := xml.Unmarshal(body, &a); err != nil {
			t.Fatal(err)
		}
		for _, ap := range a.Applications {
			for _, in := range ap.Instances {
				if ap.Name == app && in.InstanceID == id {
					return in
				}
			}
		}
		t.Fatalf("%s: no %s/%s", name, app, id)
		return goeureka.InstanceInfo{}
	}
	// Netflix's XStream escapes '_' in element names: the SDK keeps the escape.
	if p1 := sdkInstance("netflix-apps.xml", "PAYMENTS", "payments-1"); p1.Metadata.Map["instance__name"] != "payments_blue" || p1.Metadata.Map["instance_name"] != "" {
		t.Errorf("SDK metadata of payments-1: %v", p1.Metadata.Map)
	}
	o1 := sdkInstance("polaris-apps.xml", "ORDERS", "orders-1")
	// It reads metadata with a regular expression: entities stay escaped, and an entry with an
	// empty value is lost (Polaris's region and campus).
	if o1.Metadata.Map["amp"] != "a&lt;b&amp;c" {
		t.Errorf("SDK reads the metadata value a<b&c as %q", o1.Metadata.Map["amp"])
	}
	if _, ok := o1.Metadata.Map["region"]; ok {
		t.Errorf("SDK now keeps empty metadata values: %v", o1.Metadata.Map)
	}
	// It reads <overriddenstatus> (Netflix's XStream) but not <overriddenStatus> (Polaris).
	if p3 := sdkInstance("netflix-apps.xml", "PAYMENTS", "payments-3"); p3.Overriddenstatus != "OUT_OF_SERVICE" || o1.Overriddenstatus != "" {
		t.Errorf("SDK overriddenstatus: %q, %q", p3.Overriddenstatus, o1.Overriddenstatus)
	}
	// Its JSON tags cannot read Netflix's JSON ("@enabled": "true" into a bool), and its
	// metadata JSON decoder passes a map by value, so any metadata fails.
	var in goeureka.InstanceInfo
	if err := json.Unmarshal([]byte(`{"port": {"$": 8080, "@enabled": "true"}}`), &in); err == nil {
		t.Error(`SDK now reads "@enabled": "true"`)
	}
	if err := json.Unmarshal([]byte(`{"metadata": {"zone": "a"}}`), &in); err == nil {
		t.Error("SDK now reads JSON metadata")
	}
}
