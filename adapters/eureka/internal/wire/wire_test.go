package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// absent deletes a key from the base instance in jsonInstance.
type absentT struct{}

var absent absentT

// jsonInstance is a Netflix-style instance ({"instanceId": "i-1", "app": "APP", ...}) with the
// keys of over replaced (absent deletes one, json.RawMessage is written as is).
func jsonInstance(over map[string]any) string {
	base := map[string]any{
		"instanceId": "i-1", "app": "APP", "ipAddr": "10.0.0.1", "hostName": "h1.example", "status": "UP",
		"overriddenStatus": "UNKNOWN",
		"port":             map[string]any{"$": 8080, "@enabled": "true"},
		"securePort":       map[string]any{"$": 443, "@enabled": "false"},
		"vipAddress":       "app",
	}
	for k, v := range over {
		if v == absent {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	b, err := json.Marshal(base)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// jsonListing wraps instances (JSON objects or anything else) into a listing of one application.
func jsonListing(instances ...string) []byte {
	return []byte(`{"applications":{"versions__delta":"3","apps__hashcode":"UP_1_","application":[{"name":"APP","instance":[` +
		strings.Join(instances, ",") + `]}]}}`)
}

func decodeOne(t *testing.T, body []byte, f Format) (*Instance, *Skipped) {
	t.Helper()
	a, err := DecodeBytes(body, f)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, body)
	}
	switch {
	case len(a.Apps) == 1 && len(a.Apps[0].Instances) == 1 && len(a.Skipped) == 0:
		return &a.Apps[0].Instances[0], nil
	case len(a.Apps) == 0 && len(a.Skipped) == 1:
		if a.Skipped[0].Err == nil || a.Skipped[0].Reason != reasonOf(a.Skipped[0].Err) {
			t.Errorf("skipped %+v: Err and Reason disagree", a.Skipped[0])
		}
		return nil, &a.Skipped[0]
	}
	t.Fatalf("want one instance, served or skipped; got %+v", a)
	return nil, nil
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestDecodeJSONQuirks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		over  map[string]any
		check func(*Instance) bool // nil: want skipped
		skip  string               // the reason, when skipped
	}{
		// Ports: Netflix's Jackson codec writes "$" as a number and "@enabled" as a string; its
		// XStream JSON both as strings; Polaris "@enabled" as a boolean.
		{name: "jackson port", check: func(in *Instance) bool { return in.Port == Port{8080, true} && in.SecurePort == Port{443, false} }},
		{name: "xstream port strings", over: map[string]any{"port": map[string]any{"@enabled": "true", "$": "8080"}, "securePort": map[string]any{"@enabled": "true", "$": "8443"}},
			check: func(in *Instance) bool { return in.Port == Port{8080, true} && in.SecurePort == Port{8443, true} }},
		{name: "polaris port booleans", over: map[string]any{"port": raw(`{"$": 9090, "@enabled": true}`), "securePort": raw(`{"$": 0, "@enabled": false}`)},
			check: func(in *Instance) bool { return in.Port == Port{9090, true} && in.SecurePort == Port{0, false} }},
		{name: "enabled in capitals", over: map[string]any{"port": map[string]any{"$": "80", "@enabled": "TRUE"}},
			check: func(in *Instance) bool { return in.Port == Port{80, true} }},
		{name: "enabled missing: port on, securePort off (XStream's defaults)", over: map[string]any{"port": raw(`{"$": 8080}`), "securePort": raw(`{"$": 8443}`)},
			check: func(in *Instance) bool { return in.Port == Port{8080, true} && in.SecurePort == Port{8443, false} }},
		{name: "port a bare number", over: map[string]any{"port": 8080}, check: func(in *Instance) bool { return in.Port == Port{8080, true} }},
		{name: "secure port only", over: map[string]any{"port": raw(`{"$": 80, "@enabled": "false"}`), "securePort": raw(`{"$": 8443, "@enabled": "true"}`)},
			check: func(in *Instance) bool { return in.Port == Port{80, false} && in.SecurePort == Port{8443, true} }},
		{name: "no port elements at all", over: map[string]any{"port": absent, "securePort": absent}, skip: ReasonPort},
		{name: "port null", over: map[string]any{"port": nil, "securePort": absent}, skip: ReasonPort},
		{name: "no port enabled", over: map[string]any{"port": raw(`{"$": 8080, "@enabled": "false"}`)}, skip: ReasonPort},
		{name: "enabled port 0", over: map[string]any{"port": raw(`{"$": 0, "@enabled": "true"}`)}, skip: ReasonPort},
		{name: "enabled port 65536", over: map[string]any{"port": raw(`{"$": "65536", "@enabled": "true"}`)}, skip: ReasonPort},
		{name: "enabled port not a number", over: map[string]any{"port": raw(`{"$": "http", "@enabled": "true"}`)}, skip: ReasonPort},
		{name: "enabled port negative", over: map[string]any{"port": raw(`{"$": -1, "@enabled": "true"}`)}, skip: ReasonPort},
		{name: "enabled port fractional", over: map[string]any{"port": raw(`{"$": 80.5, "@enabled": "true"}`)}, skip: ReasonPort},
		{name: "enabled neither true nor false", over: map[string]any{"port": raw(`{"$": 8080, "@enabled": "yes"}`)}, skip: ReasonPort},
		{name: "port an array", over: map[string]any{"port": raw(`[8080]`)}, skip: ReasonPort},
		{name: "port number an object", over: map[string]any{"port": raw(`{"$": {"x": 1}, "@enabled": "true"}`)}, skip: ReasonPort},
		{name: "disabled port's number not checked", over: map[string]any{"securePort": raw(`{"$": "none", "@enabled": "false"}`)},
			check: func(in *Instance) bool { return in.SecurePort == Port{0, false} }},

		// Statuses.
		{name: "status lower case", over: map[string]any{"status": "up"}, check: func(in *Instance) bool { return in.Status == StatusUp }},
		{name: "status padded", over: map[string]any{"status": " DOWN "}, check: func(in *Instance) bool { return in.Status == StatusDown }},
		{name: "every known status", over: map[string]any{"status": "OUT_OF_SERVICE"}, check: func(in *Instance) bool { return in.Status == StatusOutOfService }},
		{name: "status STARTING", over: map[string]any{"status": "STARTING"}, check: func(in *Instance) bool { return in.Status == StatusStarting }},
		{name: "status UNKNOWN", over: map[string]any{"status": "UNKNOWN"}, check: func(in *Instance) bool { return in.Status == StatusUnknown }},
		{name: "unknown status", over: map[string]any{"status": "DRAINING"}, skip: ReasonStatus},
		{name: "no status", over: map[string]any{"status": absent}, skip: ReasonStatus},
		{name: "status null", over: map[string]any{"status": nil}, skip: ReasonStatus},
		{name: "status an object", over: map[string]any{"status": raw(`{"$": "UP"}`)}, skip: ReasonStatus},
		{name: "overriddenstatus, XStream's spelling", over: map[string]any{"overriddenStatus": absent, "overriddenstatus": "OUT_OF_SERVICE"},
			check: func(in *Instance) bool { return in.OverriddenStatus == StatusOutOfService }},
		{name: "overriddenStatus not a status reads UNKNOWN", over: map[string]any{"overriddenStatus": "BOGUS"},
			check: func(in *Instance) bool { return in.OverriddenStatus == StatusUnknown }},
		{name: "overriddenStatus absent reads UNKNOWN", over: map[string]any{"overriddenStatus": absent},
			check: func(in *Instance) bool { return in.OverriddenStatus == StatusUnknown }},

		// Addresses.
		{name: "ipAddr only", over: map[string]any{"hostName": absent}, check: func(in *Instance) bool { return in.IPAddr == "10.0.0.1" && in.HostName == "" }},
		{name: "hostName only", over: map[string]any{"ipAddr": ""}, check: func(in *Instance) bool { return in.IPAddr == "" && in.HostName == "h1.example" }},
		{name: "IPv6", over: map[string]any{"ipAddr": "fd00::1", "hostName": "fd00::1"}, check: func(in *Instance) bool { return in.IPAddr == "fd00::1" }},
		{name: "hostName with underscore", over: map[string]any{"hostName": "WIN_HOST-01"}, check: func(in *Instance) bool { return in.HostName == "WIN_HOST-01" }},
		{name: "no address", over: map[string]any{"ipAddr": absent, "hostName": absent, "instanceId": "i-1"}, skip: ReasonAddress},
		{name: "ipAddr not an IP", over: map[string]any{"ipAddr": "10.0.0.300"}, skip: ReasonAddress},
		{name: "hostName with a space", over: map[string]any{"hostName": "bad host"}, skip: ReasonAddress},
		{name: "hostName a URL", over: map[string]any{"hostName": "http://h1/"}, skip: ReasonAddress},
		{name: "ipAddr an object", over: map[string]any{"ipAddr": raw(`{}`)}, skip: ReasonAddress},

		// Identity: instanceId, else Amazon's instance-id, else hostName (InstanceInfo.getId).
		{name: "no instanceId: hostName", over: map[string]any{"instanceId": absent}, check: func(in *Instance) bool { return in.InstanceID == "h1.example" }},
		{name: "no instanceId: Amazon instance-id", over: map[string]any{"instanceId": "", "dataCenterInfo": map[string]any{
			"@class": "com.netflix.appinfo.AmazonInfo", "name": "Amazon", "metadata": map[string]any{"instance-id": "i-0abc", "availability-zone": "eu-west-1a"}}},
			check: func(in *Instance) bool {
				return in.InstanceID == "i-0abc" && in.DataCenterInfo.AvailabilityZone() == "eu-west-1a" && in.DataCenterInfo.Name == "Amazon"
			}},
		{name: "no id at all", over: map[string]any{"instanceId": absent, "hostName": absent}, skip: ReasonID},
		{name: "instanceId an object", over: map[string]any{"instanceId": raw(`{"a":1}`)}, skip: ReasonID},
		{name: "instanceId a number", over: map[string]any{"instanceId": 42}, check: func(in *Instance) bool { return in.InstanceID == "42" }},

		// Numbers and timestamps as strings, numbers or null (Polaris: lastDirtyTimestamp null).
		{name: "timestamps as strings", over: map[string]any{"lastUpdatedTimestamp": "1700000000001", "lastDirtyTimestamp": "1700000000002"},
			check: func(in *Instance) bool {
				return in.LastUpdatedTimestamp == 1700000000001 && in.LastDirtyTimestamp == 1700000000002
			}},
		{name: "timestamps as numbers", over: map[string]any{"lastUpdatedTimestamp": 1700000000001, "lastDirtyTimestamp": 1700000000002},
			check: func(in *Instance) bool {
				return in.LastUpdatedTimestamp == 1700000000001 && in.LastDirtyTimestamp == 1700000000002
			}},
		{name: "timestamps null or garbage are 0", over: map[string]any{"lastUpdatedTimestamp": nil, "lastDirtyTimestamp": "soon"},
			check: func(in *Instance) bool { return in.LastUpdatedTimestamp == 0 && in.LastDirtyTimestamp == 0 }},
		{name: "lease as strings (XStream JSON)", over: map[string]any{"leaseInfo": map[string]any{"renewalIntervalInSecs": "30", "durationInSecs": "90", "lastRenewalTimestamp": "1700000000000"}},
			check: func(in *Instance) bool {
				return in.LeaseInfo == LeaseInfo{RenewalIntervalInSecs: 30, DurationInSecs: 90, LastRenewalTimestamp: 1700000000000} &&
					in.LeaseInfo.LastRenewal().UnixMilli() == 1700000000000
			}},
		{name: "lease as numbers, zeros (Polaris)", over: map[string]any{"leaseInfo": map[string]any{"renewalIntervalInSecs": 30, "durationInSecs": 3600, "lastRenewalTimestamp": 0}},
			check: func(in *Instance) bool {
				return in.LeaseInfo == LeaseInfo{RenewalIntervalInSecs: 30, DurationInSecs: 3600} && in.LeaseInfo.LastRenewal().IsZero()
			}},
		{name: "lease not an object", over: map[string]any{"leaseInfo": "x"}, check: func(in *Instance) bool { return in.LeaseInfo == LeaseInfo{} }},

		// Metadata.
		{name: "metadata @class marker dropped", over: map[string]any{"metadata": map[string]any{"@class": "java.util.Collections$EmptyMap"}},
			check: func(in *Instance) bool { return in.Metadata == nil }},
		{name: "metadata @class kept beside entries (Polaris) is dropped", over: map[string]any{"metadata": map[string]any{"@class": "java.util.Collections$EmptyMap", "zone": "z1"}},
			check: func(in *Instance) bool { return maps.Equal(in.Metadata, map[string]string{"zone": "z1"}) }},
		{name: "metadata values of any type", over: map[string]any{"metadata": raw(`{"s": "x", "n": 8080, "b": true, "z": null, "o": {"a": 1}, "e": "", "esc": "a\u003cb"}`)},
			check: func(in *Instance) bool {
				return maps.Equal(in.Metadata, map[string]string{"s": "x", "n": "8080", "b": "true", "z": "", "o": "", "e": "", "esc": "a<b"})
			}},
		{name: "metadata not an object", over: map[string]any{"metadata": "x"}, check: func(in *Instance) bool { return in.Metadata == nil }},
		{name: "dataCenterInfo MyOwn", over: map[string]any{"dataCenterInfo": map[string]any{"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}},
			check: func(in *Instance) bool {
				return in.DataCenterInfo.Name == "MyOwn" && in.DataCenterInfo.AvailabilityZone() == ""
			}},

		// Everything else.
		{name: "vip addresses", over: map[string]any{"vipAddress": "svc.vip", "secureVipAddress": "svc.secure"},
			check: func(in *Instance) bool { return in.VIPAddress == "svc.vip" && in.SecureVIPAddress == "svc.secure" }},
		{name: "actionType upper-cased", over: map[string]any{"actionType": "modified"}, check: func(in *Instance) bool { return in.ActionType == ActionModified }},
		{name: "unknown keys ignored", over: map[string]any{"sid": "na", "countryId": 1, "isCoordinatingDiscoveryServer": nil, "asgName": "x", "appGroupName": ""},
			check: func(in *Instance) bool { return in.InstanceID == "i-1" }},
		{name: "instance app differs from the application's name: the application's", over: map[string]any{"app": "other"},
			check: func(in *Instance) bool { return in.App == "APP" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, skipped := decodeOne(t, jsonListing(jsonInstance(tc.over)), FormatJSON)
			switch {
			case tc.check != nil && skipped != nil:
				t.Fatalf("skipped: %v", skipped.Err)
			case tc.check != nil && !tc.check(in):
				t.Fatalf("decoded %+v", *in)
			case tc.check == nil && skipped == nil:
				t.Fatalf("served %+v, want skipped for %s", *in, tc.skip)
			case tc.check == nil && skipped.Reason != tc.skip:
				t.Fatalf("skipped for %s (%v), want %s", skipped.Reason, skipped.Err, tc.skip)
			case skipped != nil && (skipped.App != "APP" || skipped.Status == ""):
				if tc.skip != ReasonStatus && tc.skip != ReasonID {
					t.Errorf("skipped entry %+v does not name its app and status", *skipped)
				}
			}
		})
	}
}

func TestDecodeJSONStructure(t *testing.T) {
	one := jsonInstance(nil)
	two := jsonInstance(map[string]any{"instanceId": "i-2", "ipAddr": "10.0.0.2"})
	for _, tc := range []struct {
		name, doc string
		apps      int // servable instances
		skipped   int
		version   int64
		hash      string
	}{
		{name: "arrays (Jackson, Polaris)", doc: `{"applications":{"versions__delta":"3","apps__hashcode":"UP_2_","application":[{"name":"APP","instance":[` + one + `,` + two + `]}]}}`, apps: 2, version: 3, hash: "UP_2_"},
		{name: "one application an object (XStream JSON)", doc: `{"applications":{"versions__delta":"3","apps__hashcode":"UP_2_","application":{"name":"APP","instance":[` + one + `,` + two + `]}}}`, apps: 2, version: 3, hash: "UP_2_"},
		{name: "one instance an object", doc: `{"applications":{"versions__delta":3,"apps__hashcode":"UP_1_","application":[{"name":"APP","instance":` + one + `}]}}`, apps: 1, version: 3, hash: "UP_1_"},
		{name: "empty (Polaris)", doc: `{"applications":{"versions__delta":"1","apps__hashcode":"","application":[]}}`, version: 1},
		{name: "application null", doc: `{"applications":{"versions__delta":"1","apps__hashcode":"","application":null}}`, version: 1},
		{name: "no application key", doc: `{"applications":{"versions__delta":"1","apps__hashcode":""}}`, version: 1},
		{name: "no versions__delta", doc: `{"applications":{"apps__hashcode":"UP_1_","application":[{"name":"APP","instance":` + one + `}]}}`, apps: 1, version: -1, hash: "UP_1_"},
		{name: "versions__delta garbage", doc: `{"applications":{"versions__delta":"x","application":[]}}`, version: -1},
		{name: "application without instances is not listed", doc: `{"applications":{"application":[{"name":"APP","instance":[]},{"name":"B"}]}}`, version: -1},
		{name: "application not an object", doc: `{"applications":{"application":["APP",{"name":"APP","instance":` + one + `}]}}`, apps: 1, skipped: 1, version: -1},
		{name: "instance not an object", doc: `{"applications":{"application":[{"name":"APP","instance":["x",7,null,` + one + `]}]}}`, apps: 1, skipped: 3, version: -1},
		{name: "application name from the instance", doc: `{"applications":{"application":[{"instance":` + one + `}]}}`, apps: 1, version: -1},
		{name: "no application name anywhere", doc: `{"applications":{"application":[{"instance":` + jsonInstance(map[string]any{"app": absent}) + `}]}}`, skipped: 1, version: -1},
		{name: "BOM and whitespace", doc: "\xef\xbb\xbf \n" + `{"applications":{"application":[]}}`, version: -1},
		{name: "other keys and nested arrays skipped", doc: `{"other":[1,{"a":[2]}],"applications":{"x":{"y":[]},"application":[[1,[2]],{"name":"APP","z":[{}],"instance":[[1],` + one + `]}]},"tail":null}`,
			apps: 1, skipped: 2, version: -1},
		{name: "one instance a scalar", doc: `{"applications":{"application":{"name":"APP","instance":"x"}}}`, skipped: 1, version: -1},
		{name: "one instance an object with escapes", doc: `{"applications":{"application":{"name":"APP","instance":` +
			jsonInstance(map[string]any{"instanceId": "i\u002d1", "metadata": map[string]any{"k\"q": "v\u00e9"}}) + `}}}`, apps: 1, version: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := DecodeBytes([]byte(tc.doc), FormatJSON)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, app := range a.Apps {
				n += len(app.Instances)
				if len(app.Instances) == 0 {
					t.Errorf("application %s listed without instances", app.Name)
				}
			}
			if n != tc.apps || len(a.Skipped) != tc.skipped || a.VersionsDelta != tc.version || a.AppsHashcode != tc.hash {
				t.Errorf("got %d served, %d skipped, version %d, hash %q; want %d, %d, %d, %q (%+v)",
					n, len(a.Skipped), a.VersionsDelta, a.AppsHashcode, tc.apps, tc.skipped, tc.version, tc.hash, a)
			}
		})
	}
}

// One instance written as an object (XStream JSON) decodes as the same instance in an array.
func TestDecodeJSONSingleObject(t *testing.T) {
	in := jsonInstance(map[string]any{"instanceId": "i\u002d1", "metadata": map[string]any{"k\"q": "v\u00e9 \\ <x>", "@class": "x"},
		"dataCenterInfo": map[string]any{"name": "Amazon", "metadata": map[string]any{"availability-zone": "z"}}})
	single, err := DecodeBytes([]byte(`{"applications":{"application":{"name":"APP","instance":`+in+`}}}`), FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	array, err := DecodeBytes([]byte(`{"applications":{"application":[{"name":"APP","instance":[`+in+`]}]}}`), FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(single, array) || single.Servable() != 1 || single.Apps[0].Instances[0].Metadata["k\"q"] != "v\u00e9 \\ <x>" {
		t.Errorf("single %+v\narray %+v", single, array)
	}
}

func TestDecodeDuplicates(t *testing.T) {
	first := jsonInstance(map[string]any{"ipAddr": "10.0.0.1"})
	second := jsonInstance(map[string]any{"ipAddr": "10.0.0.2"})
	// The same instance twice, once under "app" and once under "APP": Netflix's client keys
	// applications by upper-cased name and instances by id; the later one is kept.
	doc := `{"applications":{"application":[{"name":"app","instance":` + first + `},{"name":"APP","instance":[` + second + `,` +
		jsonInstance(map[string]any{"instanceId": "i-2"}) + `]}]}}`
	a, err := DecodeBytes([]byte(doc), FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Apps) != 1 || len(a.Apps[0].Instances) != 2 || a.Apps[0].Instances[0].IPAddr != "10.0.0.2" || a.Duplicates != 1 {
		t.Fatalf("got %+v", a)
	}
	if h := Hashcode(a); h != "UP_2_" {
		t.Errorf("Hashcode %q: a duplicate counts once", h)
	}
	// A valid instance replaced by a later malformed one with the same id is skipped, and the
	// other way round.
	badOne := jsonInstance(map[string]any{"status": "BOGUS"})
	a, _ = DecodeBytes(jsonListing(first, badOne), FormatJSON)
	if len(a.Apps) != 0 || len(a.Skipped) != 1 || a.Duplicates != 1 {
		t.Errorf("valid then malformed: %+v", a)
	}
	a, _ = DecodeBytes(jsonListing(badOne, first), FormatJSON)
	if len(a.Apps) != 1 || len(a.Skipped) != 0 || a.Duplicates != 1 {
		t.Errorf("malformed then valid: %+v", a)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		f    Format
	}{
		{"not JSON", `applications`, FormatJSON},
		{"truncated JSON", string(jsonListing(jsonInstance(nil)))[:100], FormatJSON},
		{"no applications object", `{"application":[]}`, FormatJSON},
		{"applications null", `{"applications":null}`, FormatJSON},
		{"a JSON array", `[]`, FormatJSON},
		{"applications not an object", `{"applications":"x"}`, FormatJSON},
		{"data after the listing", `{"applications":{}} {}`, FormatJSON},
		{"a bare string", `"applications"`, FormatJSON},
		{"truncated inside an instance", `{"applications":{"application":[{"name":"A","instance":[{"instanceId":"x`, FormatJSON},
		{"not XML", `applications`, FormatXML},
		{"truncated XML", `<applications><application><name>A</name>`, FormatXML},
		{"other XML root", `<application><name>A</name></application>`, FormatXML},
		{"XML without the closing </applications>", `<applications><application><name>A</name></application>`, FormatXML},
		{"XML instance malformed", `<applications><application><name>A</name><instance><port enabled="true>80</port></instance></application></applications>`, FormatXML},
		// Polaris writes metadata keys as element names unescaped: a key with '$' (or a space)
		// makes its whole XML listing malformed.
		{"XML element name with $ (Polaris)", `<applications><application><name>A</name><instance><metadata><dol$lar>3</dol$lar></metadata></instance></application></applications>`, FormatXML},
		{"unknown format", `{}`, Format(9)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := DecodeBytes([]byte(tc.body), tc.f)
			if err == nil {
				t.Fatalf("decoded %+v", a)
			}
			t.Log(err)
		})
	}
}

func TestDecodeLimit(t *testing.T) {
	body := jsonListing(jsonInstance(nil))
	n := int64(len(body))
	if _, err := Decode(bytes.NewReader(body), "application/json", n); err != nil {
		t.Fatalf("exactly at the limit: %v", err)
	}
	_, err := Decode(bytes.NewReader(body), "application/json", n-1)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v, want ErrTooLarge", err)
	}
	// A body far over the limit is not read to its end, in either format; one that is no
	// listing from its first bytes is not either.
	for _, start := range []string{`{"applications":{"application":[`, `<applications><application>`} {
		big := &CountingReader{R: io.MultiReader(strings.NewReader(start), bytes.NewReader(bytes.Repeat([]byte(" "), 10<<20)))}
		_, err := Decode(big, "", 1024)
		var le *LimitError
		if !errors.As(err, &le) || le.What != LimitBytes || le.Limit != 1024 || big.N > 1025 {
			t.Fatalf("10 MiB body, limit 1 KiB: %v after reading %d bytes", err, big.N)
		}
	}
	zeros := &CountingReader{R: bytes.NewReader(make([]byte, 10<<20))}
	if _, err := Decode(zeros, "", 1024); err == nil || zeros.N > 1025 {
		t.Fatalf("10 MiB of zeros, limit 1 KiB: %v after reading %d bytes", err, zeros.N)
	}
	if _, err := Decode(bytes.NewReader(body), "", 0); err != nil {
		t.Fatalf("limit 0 (DefaultMaxBody): %v", err)
	}
	if _, err := Decode(iotest.ErrReader(errors.New("boom")), "", 0); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("read error: %v", err)
	}
}

func TestFormatOf(t *testing.T) {
	for _, tc := range []struct {
		ct, body string
		want     Format
	}{
		{"application/json", "<x/>", FormatJSON},
		{"application/json;charset=UTF-8", "", FormatJSON},
		{"application/xml", "{}", FormatXML},
		{"text/xml; charset=utf-8", "", FormatXML},
		{"application/vnd.eureka+json", "", FormatJSON},
		{"", "  \n<?xml version=\"1.0\"?><applications/>", FormatXML},
		{"", "\xef\xbb\xbf<applications/>", FormatXML},
		{"", `{"applications":{}}`, FormatJSON},
		{"text/plain", "<applications/>", FormatXML},
		{"garbage;;", `{}`, FormatJSON},
	} {
		if got := FormatOf(tc.ct, []byte(tc.body)); got != tc.want {
			t.Errorf("FormatOf(%q, %q) = %v, want %v", tc.ct, tc.body, got, tc.want)
		}
	}
	if FormatXML.MediaType() != "application/xml" || FormatJSON.MediaType() != "application/json" || FormatXML.String() != "xml" {
		t.Error("Format names")
	}
	// Decode sniffs an unlabelled body.
	a, err := Decode(strings.NewReader(`<applications><apps__hashcode>UP_1_</apps__hashcode></applications>`), "", 0)
	if err != nil || a.AppsHashcode != "UP_1_" {
		t.Errorf("sniffed XML: %+v, %v", a, err)
	}
}

// xmlListing wraps instance elements into a listing of one application.
func xmlListing(instances ...string) []byte {
	return []byte(`<?xml version="1.0" encoding="UTF-8"?>
<applications><versions__delta>3</versions__delta><apps__hashcode>UP_1_</apps__hashcode><application><name>APP</name>` +
		strings.Join(instances, "") + `</application></applications>`)
}

// xmlInstance is an instance element with the children of body (and instanceId, app, ipAddr,
// status unless body has them).
func xmlInst(body string) string {
	var b strings.Builder
	b.WriteString("<instance>")
	for _, el := range []string{"<instanceId>i-1</instanceId>", "<app>APP</app>", "<ipAddr>10.0.0.1</ipAddr>", "<status>UP</status>"} {
		if !strings.Contains(body, el[:strings.Index(el, ">")+1]) {
			b.WriteString(el)
		}
	}
	b.WriteString(body)
	b.WriteString("</instance>")
	return b.String()
}

func TestDecodeXMLQuirks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		check func(*Instance) bool
		skip  string
	}{
		{name: "ports with enabled", body: `<port enabled="true">8080</port><securePort enabled="false">443</securePort>`,
			check: func(in *Instance) bool { return in.Port == Port{8080, true} && in.SecurePort == Port{443, false} }},
		{name: "enabled missing: port on, securePort off", body: `<port>8080</port><securePort>8443</securePort>`,
			check: func(in *Instance) bool { return in.Port == Port{8080, true} && in.SecurePort == Port{8443, false} }},
		{name: "port padded", body: "<port enabled=\"true\">\n 8080 \n</port>", check: func(in *Instance) bool { return in.Port == Port{8080, true} }},
		{name: "no port element", body: `<securePort enabled="false">443</securePort>`, skip: ReasonPort},
		{name: "enabled port empty", body: `<port enabled="true"></port>`, skip: ReasonPort},
		{name: "enabled garbage", body: `<port enabled="on">80</port>`, skip: ReasonPort},
		{name: "overriddenstatus (XStream)", body: `<port>80</port><overriddenstatus>OUT_OF_SERVICE</overriddenstatus>`,
			check: func(in *Instance) bool { return in.OverriddenStatus == StatusOutOfService }},
		{name: "overriddenStatus (Polaris)", body: `<port>80</port><overriddenStatus>DOWN</overriddenStatus>`,
			check: func(in *Instance) bool { return in.OverriddenStatus == StatusDown }},
		{name: "status unknown", body: `<port>80</port><status>BOGUS</status>`, skip: ReasonStatus},
		{name: "status empty", body: `<port>80</port><status/>`, skip: ReasonStatus},
		{name: "no address", body: `<port>80</port><ipAddr></ipAddr>`, skip: ReasonAddress},
		{name: "no instanceId: hostName", body: `<port>80</port><instanceId/><hostName>h.example</hostName>`,
			check: func(in *Instance) bool { return in.InstanceID == "h.example" }},
		{name: "metadata: entities, empty values, XStream-escaped names", body: `<port>80</port><metadata>` +
			`<a>x &lt;y&gt; &amp; z</a><empty></empty><self/><instance__name>n_1</instance__name><price_-usd>3</price_-usd>` +
			`<sp_.0020ace>s</sp_.0020ace><management.port>8081</management.port><cdata><![CDATA[<raw>]]></cdata></metadata>`,
			check: func(in *Instance) bool {
				return maps.Equal(in.Metadata, map[string]string{"a": "x <y> & z", "empty": "", "self": "", "instance_name": "n_1",
					"price$usd": "3", "sp ace": "s", "management.port": "8081", "cdata": "<raw>"})
			}},
		{name: "metadata EmptyMap", body: `<port>80</port><metadata class="java.util.Collections$EmptyMap"/>`,
			check: func(in *Instance) bool { return in.Metadata == nil }},
		{name: "Amazon dataCenterInfo", body: `<port>80</port><dataCenterInfo class="com.netflix.appinfo.AmazonInfo"><name>Amazon</name>` +
			`<metadata><availability-zone>us-west-2b</availability-zone><instance-id>i-9</instance-id></metadata></dataCenterInfo>`,
			check: func(in *Instance) bool {
				return in.DataCenterInfo.AvailabilityZone() == "us-west-2b" && in.DataCenterInfo.Class == "com.netflix.appinfo.AmazonInfo"
			}},
		{name: "timestamps and lease", body: `<port>80</port><leaseInfo><durationInSecs>90</durationInSecs><lastRenewalTimestamp>1700000000000</lastRenewalTimestamp></leaseInfo>` +
			`<lastUpdatedTimestamp>17</lastUpdatedTimestamp><lastDirtyTimestamp>x</lastDirtyTimestamp><actionType>DELETED</actionType>`,
			check: func(in *Instance) bool {
				return in.LeaseInfo == LeaseInfo{DurationInSecs: 90, LastRenewalTimestamp: 1700000000000} &&
					in.LastUpdatedTimestamp == 17 && in.LastDirtyTimestamp == 0 && in.ActionType == ActionDeleted
			}},
		{name: "unknown elements ignored", body: `<port>80</port><countryId>1</countryId><sid>na</sid><isCoordinatingDiscoveryServer>false</isCoordinatingDiscoveryServer><x><y/></x>`,
			check: func(in *Instance) bool { return in.InstanceID == "i-1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, skipped := decodeOne(t, xmlListing(xmlInst(tc.body)), FormatXML)
			switch {
			case tc.check != nil && skipped != nil:
				t.Fatalf("skipped: %v", skipped.Err)
			case tc.check != nil && !tc.check(in):
				t.Fatalf("decoded %+v", *in)
			case tc.check == nil && skipped == nil:
				t.Fatalf("served %+v, want skipped for %s", *in, tc.skip)
			case tc.check == nil && skipped.Reason != tc.skip:
				t.Fatalf("skipped for %s (%v), want %s", skipped.Reason, skipped.Err, tc.skip)
			}
		})
	}
}

func TestDecodeXMLStructure(t *testing.T) {
	doc := `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<!-- a comment -->
<applications>
  <other><nested>1</nested></other>
  <apps__hashcode> UP_2_ </apps__hashcode>
  <versions__delta>12</versions__delta>
  <application>
    <instance>` + strings.TrimPrefix(strings.TrimSuffix(xmlInst(`<port>80</port>`), "</instance>"), "<instance>") + `</instance>
    <name>APP</name>
    <unknown/>
  </application>
  <application><name>EMPTY</name></application>
  <application><name>app</name>` + xmlInst(`<instanceId>i-2</instanceId><port>81</port>`) + `</application>
</applications>
<trailing>ignored</trailing>`
	a, err := DecodeBytes([]byte(doc), FormatXML)
	if err != nil {
		t.Fatal(err)
	}
	// The name may follow the instances; "app" and "APP" are one application.
	if a.VersionsDelta != 12 || a.AppsHashcode != "UP_2_" || len(a.Apps) != 1 || len(a.Apps[0].Instances) != 2 || a.Apps[0].Name != "APP" {
		t.Errorf("decoded %+v", a)
	}
}

func TestXStreamName(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"a_b":              "a_b", // Polaris: unescaped, and nothing to undo
		"a__b":             "a_b",
		"versions__delta":  "versions_delta",
		"_-class":          "$class",
		"x_-y__z":          "x$y_z",
		"sp_.0020ace":      "sp ace",
		"bad_.zz12":        "bad_.zz12", // not hex: left alone
		"short_.00":        "short_.00",
		"trailing_":        "trailing_",
		"___":              "__",
		"management.port":  "management.port",
		"_.00e9t_.00e9":    "été",
		"a__-b":            "a_-b",
		"instance__name__": "instance_name_",
	} {
		if got := xstreamName(in); got != want {
			t.Errorf("xstreamName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The same listing in JSON and XML decodes to the same registry.
func TestJSONAndXMLAgree(t *testing.T) {
	j := readFixture(t, "netflix-apps.json")
	x := readFixture(t, "netflix-apps.xml")
	if !reflect.DeepEqual(j, x) || len(Diff(j, x)) != 0 {
		t.Errorf("JSON and XML differ: %v", Diff(j, x))
	}
}

// FuzzDecode: no input panics, and whatever decodes holds only servable instances. The seeds
// are the fixtures; `go test -fuzz FuzzDecode` explores from them.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"netflix-apps.json", "netflix-apps.xml", "netflix-apps-xstream.json", "netflix-delta.json", "polaris-delta.xml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(jsonListing(jsonInstance(map[string]any{"port": raw(`[1]`), "metadata": raw(`{"a": {"b": [1]}}`)})))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, format := range []Format{FormatJSON, FormatXML} {
			a, err := DecodeBytes(body, format)
			if err != nil {
				continue
			}
			for _, app := range a.Apps {
				if len(app.Instances) == 0 {
					t.Fatalf("application %q without instances", app.Name)
				}
				for _, in := range app.Instances {
					if in.InstanceID == "" || in.App == "" || !knownStatus(in.Status) || (in.IPAddr == "" && in.HostName == "") ||
						!(in.Port.Enabled && in.Port.Number > 0 || in.SecurePort.Enabled && in.SecurePort.Number > 0) {
						t.Fatalf("served a malformed instance %+v", in)
					}
				}
			}
			for _, s := range a.Skipped {
				if s.Err == nil || s.Reason == "" {
					t.Fatalf("skipped without a reason: %+v", s)
				}
			}
			next, res := ApplyDelta(a, a)
			if res.Hashcode != Hashcode(next) {
				t.Fatal("DeltaResult.Hashcode disagrees with Hashcode")
			}
		}
	})
}
