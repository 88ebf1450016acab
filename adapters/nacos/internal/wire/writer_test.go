package wire

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
)

// An InstanceRequest carries what Nacos's does, under its JSON names: the naming fields with
// the defaults filled in, the operation, and the instance made ephemeral and named; a failed
// InstanceResponse is a ServerError.
func TestInstanceRequests(t *testing.T) {
	f := newFakeServer(t)
	got := make(chan *Payload, 4)
	var result atomic.Int32 // the resultCode of the answers
	result.Store(200)
	f.on(typeInstanceRequest, func(p *Payload) *Payload {
		got <- p
		return jsonPayload(typeInstanceResponse, map[string]any{"resultCode": result.Load(), "errorCode": 0, "type": "registerInstance"})
	})
	c := dialFake(t, f, DialConfig{})
	ref := Ref{Service: "svc"}
	in := Instance{IP: "10.0.0.1", Port: 8080, Weight: 1, Healthy: true, Enabled: true, ClusterName: "DEFAULT"}
	if err := c.RegisterInstance(context.Background(), ref, in); err != nil {
		t.Fatal(err)
	}
	var req struct {
		RequestID   string         `json:"requestId"`
		Namespace   string         `json:"namespace"`
		ServiceName string         `json:"serviceName"`
		GroupName   string         `json:"groupName"`
		Module      string         `json:"module"`
		Type        string         `json:"type"`
		Instance    map[string]any `json:"instance"`
	}
	if err := json.Unmarshal((<-got).Body, &req); err != nil {
		t.Fatal(err)
	}
	i := req.Instance
	if req.RequestID == "" || req.Namespace != "public" || req.ServiceName != "svc" || req.GroupName != "DEFAULT_GROUP" || req.Module != "naming" ||
		req.Type != "registerInstance" || i["ip"] != "10.0.0.1" || i["port"] != float64(8080) || i["weight"] != float64(1) ||
		i["healthy"] != true || i["enabled"] != true || i["ephemeral"] != true || i["clusterName"] != "DEFAULT" ||
		i["serviceName"] != "svc" || i["metadata"] == nil {
		t.Fatalf("InstanceRequest %+v", req)
	}
	if err := c.DeregisterInstance(context.Background(), Ref{Namespace: "ns", Group: "g", Service: "svc"}, in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal((<-got).Body, &req); err != nil {
		t.Fatal(err)
	}
	if req.Type != "deregisterInstance" || req.Namespace != "ns" || req.GroupName != "g" {
		t.Fatalf("deregistration %+v", req)
	}
	result.Store(500)
	var se *ServerError
	if err := c.RegisterInstance(context.Background(), ref, in); !errors.As(err, &se) || se.Code != 500 {
		t.Fatalf("a failed InstanceResponse: %v, want a ServerError 500", err)
	}
}
