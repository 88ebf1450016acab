package wire

import (
	"bytes"
	"fmt"
	"testing"
)

// The scale: 2,000 applications x 10 instances, 1% churn per poll.
const benchApps, benchPerApp = 2000, 10

// benchListing writes a listing of benchApps x benchPerApp instances in Netflix's Jackson JSON or
// XStream XML, every instance as large as a Spring Cloud one (URLs, lease, a few metadata
// entries); status is the status of every instance, action its actionType; only the first
// `only` instances (all if 0) are written.
func benchListing(f Format, status, action string, only int) []byte {
	var b bytes.Buffer
	if f == FormatJSON {
		b.WriteString(`{"applications":{"versions__delta":"1","apps__hashcode":"","application":[`)
	} else {
		b.WriteString(`<applications><versions__delta>1</versions__delta><apps__hashcode></apps__hashcode>`)
	}
	n := 0
	for a := 0; a < benchApps && (only == 0 || n < only); a++ {
		app := fmt.Sprintf("SERVICE-%04d", a)
		if f == FormatJSON {
			if a > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":%q,"instance":[`, app)
		} else {
			fmt.Fprintf(&b, `<application><name>%s</name>`, app)
		}
		for i := 0; i < benchPerApp && (only == 0 || n < only); i++ {
			n++
			id := fmt.Sprintf("%s-%d", app, i)
			ip := fmt.Sprintf("10.%d.%d.%d", a/256, a%256, i+1)
			if f == FormatJSON {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"instanceId":%q,"hostName":%q,"app":%q,"ipAddr":%q,"status":%q,"overriddenStatus":"UNKNOWN",`+
					`"port":{"$":8080,"@enabled":"true"},"securePort":{"$":443,"@enabled":"false"},"countryId":1,`+
					`"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},`+
					`"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":90,"registrationTimestamp":1700000000000,"lastRenewalTimestamp":1700000090000,"evictionTimestamp":0,"serviceUpTimestamp":1700000000500},`+
					`"metadata":{"management.port":"8081","zone":"zone-a","version":"v1"},`+
					`"homePageUrl":"http://%s:8080/","statusPageUrl":"http://%s:8081/actuator/info","healthCheckUrl":"http://%s:8081/actuator/health",`+
					`"vipAddress":%q,"secureVipAddress":%q,"isCoordinatingDiscoveryServer":"false","lastUpdatedTimestamp":"1700000000600","lastDirtyTimestamp":"1700000000400","actionType":%q}`,
					id, ip, app, ip, status, ip, ip, ip, app, app, action)
			} else {
				fmt.Fprintf(&b, `<instance><instanceId>%s</instanceId><hostName>%s</hostName><app>%s</app><ipAddr>%s</ipAddr><status>%s</status>`+
					`<overriddenstatus>UNKNOWN</overriddenstatus><port enabled="true">8080</port><securePort enabled="false">443</securePort><countryId>1</countryId>`+
					`<dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"><name>MyOwn</name></dataCenterInfo>`+
					`<leaseInfo><renewalIntervalInSecs>30</renewalIntervalInSecs><durationInSecs>90</durationInSecs><registrationTimestamp>1700000000000</registrationTimestamp>`+
					`<lastRenewalTimestamp>1700000090000</lastRenewalTimestamp><evictionTimestamp>0</evictionTimestamp><serviceUpTimestamp>1700000000500</serviceUpTimestamp></leaseInfo>`+
					`<metadata><management.port>8081</management.port><zone>zone-a</zone><version>v1</version></metadata>`+
					`<homePageUrl>http://%s:8080/</homePageUrl><statusPageUrl>http://%s:8081/actuator/info</statusPageUrl><healthCheckUrl>http://%s:8081/actuator/health</healthCheckUrl>`+
					`<vipAddress>%s</vipAddress><secureVipAddress>%s</secureVipAddress><isCoordinatingDiscoveryServer>false</isCoordinatingDiscoveryServer>`+
					`<lastUpdatedTimestamp>1700000000600</lastUpdatedTimestamp><lastDirtyTimestamp>1700000000400</lastDirtyTimestamp><actionType>%s</actionType></instance>`,
					id, ip, app, ip, status, ip, ip, ip, app, app, action)
			}
		}
		if f == FormatJSON {
			b.WriteString(`]}`)
		} else {
			b.WriteString(`</application>`)
		}
	}
	if f == FormatJSON {
		b.WriteString(`]}}`)
	} else {
		b.WriteString(`</applications>`)
	}
	return b.Bytes()
}

func benchmarkDecode(b *testing.B, f Format) {
	body := benchListing(f, StatusUp, ActionAdded, 0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		a, err := DecodeBytes(body, f)
		if err != nil || len(a.Apps) != benchApps {
			b.Fatalf("%v, %d apps", err, len(a.Apps))
		}
	}
}

func BenchmarkDecodeJSON2000x10(b *testing.B) { benchmarkDecode(b, FormatJSON) }
func BenchmarkDecodeXML2000x10(b *testing.B)  { benchmarkDecode(b, FormatXML) }

// BenchmarkApplyDelta1pct: a delta of 1% of the registry (200 instances, every one of them a
// change) decoded and applied to 2,000 x 10, and the result's hashcode computed.
func BenchmarkApplyDelta1pct(b *testing.B) {
	cur, err := DecodeBytes(benchListing(FormatJSON, StatusUp, ActionAdded, 0), FormatJSON)
	if err != nil {
		b.Fatal(err)
	}
	body := benchListing(FormatJSON, StatusOutOfService, ActionModified, benchApps*benchPerApp/100)
	b.ReportAllocs()
	for b.Loop() {
		delta, err := DecodeBytes(body, FormatJSON)
		if err != nil {
			b.Fatal(err)
		}
		_, res := ApplyDelta(cur, delta)
		if len(res.Changed) != 20 {
			b.Fatalf("changed %d apps", len(res.Changed))
		}
	}
}

// TestBenchListing checks the benchmarks' listings on a slice of them (all of them take 15 s
// under -race).
func TestBenchListing(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatXML} {
		a, err := DecodeBytes(benchListing(f, StatusUp, ActionAdded, 500), f)
		if err != nil || a.Servable() != 500 || len(a.Apps) != 50 || len(a.Skipped) != 0 || Hashcode(a) != "UP_500_" {
			t.Fatalf("%v: %v, %d instances, %d skipped", f, err, a.Servable(), len(a.Skipped))
		}
	}
}
