package wire

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeServiceInfo(t *testing.T) {
	in := `{"name":"DEFAULT_GROUP@@svc","groupName":"DEFAULT_GROUP","clusters":"c1","cacheMillis":10000,
	"hosts":[{"instanceId":"i1","ip":"10.0.0.1","port":8080,"weight":1.5,"healthy":true,"enabled":true,
	"ephemeral":false,"clusterName":"c1","serviceName":"DEFAULT_GROUP@@svc","metadata":{"a":"1","b":""},
	"instanceHeartBeatInterval":5000,"ipDeleteTimeout":30000},{"ip":"10.0.0.2","port":81,"metadata":null}],
	"lastRefTime":1700000000000,"checksum":"abc","allIPs":false,"reachProtectThreshold":true,"valid":true,"extra":{"x":[1,2,{}]}}`
	got, err := DecodeServiceInfo([]byte(in), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := &ServiceInfo{
		Name: "DEFAULT_GROUP@@svc", GroupName: "DEFAULT_GROUP", Clusters: "c1", CacheMillis: 10000,
		Hosts: []Instance{
			{InstanceID: "i1", IP: "10.0.0.1", Port: 8080, Weight: 1.5, Healthy: true, Enabled: true,
				ClusterName: "c1", ServiceName: "DEFAULT_GROUP@@svc", Metadata: map[string]string{"a": "1", "b": ""}},
			{IP: "10.0.0.2", Port: 81},
		},
		LastRefTime: 1700000000000, Checksum: "abc", ReachProtectionThreshold: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// Both spellings of the protect-threshold flag.
	for _, key := range []string{"reachProtectionThreshold", "reachProtectThreshold"} {
		got, err := DecodeServiceInfo([]byte(`{"`+key+`":true}`), Limits{})
		if err != nil || !got.ReachProtectionThreshold {
			t.Errorf("%s: %+v, %v", key, got, err)
		}
	}
	if got, err := DecodeServiceInfo([]byte(`null`), Limits{}); err != nil || len(got.Hosts) != 0 {
		t.Errorf("null: %+v, %v", got, err)
	}
}

func TestDecodeServiceInfoLimits(t *testing.T) {
	lim := Limits{MaxInstances: 2, MaxMetadataEntries: 2, MaxKeyBytes: 3, MaxValueBytes: 4, MaxStringBytes: 5, MaxServiceNames: 2}
	for name, tc := range map[string]struct{ in, want string }{
		"instances":       {`{"hosts":[{},{},{}]}`, "more than 2 instances"},
		"metadata":        {`{"hosts":[{"metadata":{"a":"","b":"","c":""}}]}`, "more than 2 metadata entries"},
		"key":             {`{"hosts":[{"metadata":{"abcd":""}}]}`, "metadata key longer than 3 bytes"},
		"value":           {`{"hosts":[{"metadata":{"a":"12345"}}]}`, "metadata value longer than 4 bytes"},
		"ip":              {`{"hosts":[{"ip":"123456"}]}`, "ip longer than 5 bytes"},
		"name":            {`{"name":"123456"}`, "name longer than 5 bytes"},
		"port type":       {`{"hosts":[{"port":"80"}]}`, "port: want int, got string"},
		"port fraction":   {`{"hosts":[{"port":80.5}]}`, "port"},
		"hosts object":    {`{"hosts":{}}`, "instances: want an array"},
		"not an object":   {`[1]`, "want an object"},
		"truncated":       {`{"hosts":[{"ip":"1"`, "malformed JSON"},
		"trailing data":   {`{} {}`, "data after the JSON document"},
		"metadata number": {`{"hosts":[{"metadata":{"a":1}}]}`, "metadata value: want string"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeServiceInfo([]byte(tc.in), lim)
			var de *DecodeError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeServiceInfo(%s) = %v, want a DecodeError with %q", tc.in, err, tc.want)
			}
			if strings.Contains(err.Error(), tc.in) && len(tc.in) > 10 {
				t.Errorf("the error holds the body: %v", err)
			}
		})
	}
	// Repeated keys count once.
	if _, err := DecodeServiceInfo([]byte(`{"hosts":[{"metadata":{"a":"","b":"","a":"x"}}]}`), lim); err != nil {
		t.Errorf("a repeated metadata key: %v", err)
	}
}

func TestDecodeResponses(t *testing.T) {
	page, err := decodeServiceListResponse([]byte(`{"resultCode":200,"count":3,"serviceNames":["a","b"]}`), Limits{})
	if err != nil || page.Count != 3 || !reflect.DeepEqual(page.Names, []string{"a", "b"}) {
		t.Errorf("service list: %+v, %v", page, err)
	}
	if _, err := decodeServiceListResponse([]byte(`{"resultCode":200,"serviceNames":["a","b","c"]}`), Limits{MaxServiceNames: 2}); err == nil || !strings.Contains(err.Error(), "more than 2 service names") {
		t.Errorf("service names over the limit: %v", err)
	}
	if _, err := decodeServiceListResponse([]byte(`{"resultCode":200,"count":-1}`), Limits{}); err == nil {
		t.Error("a negative count was accepted")
	}
	id, err := decodeServerCheckResponse([]byte(`{"resultCode":200,"connectionId":"c1"}`), Limits{})
	if err != nil || id != "c1" {
		t.Errorf("server check: %q, %v", id, err)
	}
	if _, err := decodeServerCheckResponse([]byte(`{"resultCode":200}`), Limits{}); err == nil {
		t.Error("a server check without a connection ID was accepted")
	}
	// resultCode decides, not success (Polaris sends success false with 200), and a failure
	// without an errorCode is its resultCode.
	if err := decodeResponse([]byte(`{"resultCode":200,"success":false}`), "x", Limits{}, nil); err != nil {
		t.Errorf("200 with success false: %v", err)
	}
	var se *ServerError
	if err := decodeResponse([]byte(`{"resultCode":500,"success":true,"message":"m"}`), "x", Limits{}, nil); !errors.As(err, &se) || se.Code != 500 || se.Message != "m" {
		t.Errorf("500 with success true: %v", err)
	}
	if _, err := decodeSubscribeResponse([]byte(`{"resultCode":200}`), Limits{}); err == nil {
		t.Error("a SubscribeServiceResponse without serviceInfo was accepted")
	}
}

func TestDecodeNotifySubscriber(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want Ref
	}{
		"nacos 2":        {`{"requestId":"1","namespace":"public","serviceName":"svc","groupName":"g","serviceInfo":{"name":"svc"}}`, Ref{Group: "g", Service: "svc"}},
		"namespace":      {`{"namespace":"ns1","serviceName":"svc","groupName":"g","serviceInfo":{}}`, Ref{Namespace: "ns1", Group: "g", Service: "svc"}},
		"from info":      {`{"serviceInfo":{"name":"g@@svc"}}`, Ref{Group: "g", Service: "svc"}},
		"info and group": {`{"serviceInfo":{"name":"svc","groupName":"g"}}`, Ref{Group: "g", Service: "svc"}},
		"default group":  {`{"serviceName":"svc","serviceInfo":{}}`, Ref{Group: "DEFAULT_GROUP", Service: "svc"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, ref, _, err := decodeNotifySubscriber([]byte(tc.in), Limits{})
			if err != nil || ref != tc.want {
				t.Errorf("%+v, %v; want %+v", ref, err, tc.want)
			}
		})
	}
	for _, in := range []string{`{"serviceName":"svc"}`, `{"serviceInfo":{}}`, `{"serviceName":"svc","serviceInfo":[]}`} {
		if _, _, _, err := decodeNotifySubscriber([]byte(in), Limits{}); err == nil {
			t.Errorf("%s accepted", in)
		}
	}
}

func TestClip(t *testing.T) {
	if got := Clip("a\nb\x1bc", 10); got != "a?b?c" {
		t.Errorf("Clip = %q", got)
	}
	if got := Clip("ééé", 4); got != "éé…" {
		t.Errorf("Clip at a rune boundary = %q", got)
	}
}

// BenchmarkDecodeSubscribeResponse decodes a service of 10 instances as Polaris answers a
// subscription (the shape of every push and answer at a start), for docs/benchmarks.md.
func BenchmarkDecodeSubscribeResponse(b *testing.B) {
	var hosts []string
	for i := range 10 {
		hosts = append(hosts, fmt.Sprintf(`{"instanceId":"88d59de7c0dc02fe4d963b6fc83671c2962368f%d","ip":"10.19.171.%d","port":8080,"weight":1,"healthy":true,"enabled":true,"ephemeral":true,"clusterName":"DEFAULT","serviceName":"DEFAULT_GROUP@@load-04921","metadata":{"preserved.register.source":"SPRING_CLOUD","version":"v1","zone":"zone-a","internal-nacos-cluster":"DEFAULT","internal-nacos-service":"DEFAULT_GROUP@@load-04921"},"instanceHeartBeatInterval":5000,"instanceHeartBeatTimeOut":15000,"ipDeleteTimeout":30000}`, i, i))
	}
	body := []byte(`{"resultCode":200,"errorCode":0,"message":null,"requestId":"17","serviceInfo":{"name":"load-04921","groupName":"DEFAULT_GROUP","clusters":"","cacheMillis":1000,"hosts":[` +
		strings.Join(hosts, ",") + `],"lastRefTime":1764230000000,"checksum":"c0ffee","allIPs":false,"reachProtectionThreshold":false,"valid":true}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		info, err := decodeSubscribeResponse(body, Limits{})
		if err != nil || len(info.Hosts) != 10 {
			b.Fatal(info, err)
		}
	}
}
