package xdsclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
	"github.com/galleon-mesh/galleon/internal/xdsclient/xdsclienttest"
)

func TestSotWStreamRequestSequence(t *testing.T) {
	good := xdsclienttest.MCPResource(t, "ns/a", "1", time.Time{}, nil, serviceEntry("a"))
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seType: {
			{TypeUrl: seType, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{good, {TypeUrl: seType}}},
			{TypeUrl: seType, VersionInfo: "v2", Nonce: "n2"},
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := xdsclient.OpenSotW(ctx, xdsclienttest.Dial(t, srv.Addr), xdsclient.NewNode("test-node"), []string{seType})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Resources) != 1 || len(r1.Errors) != 1 || r1.Errors[0].Index != 1 {
		t.Fatalf("response 1: %d resources, errors %v", len(r1.Resources), r1.Errors)
	}
	if err := s.NACK(r1, errors.New("bad resource")); err != nil {
		t.Fatal(err)
	}
	if err := s.ACK(r1); err != nil {
		t.Fatal(err)
	}
	r2, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ACK(r2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.AllAcked():
	case <-ctx.Done():
		t.Fatal("not every response was ACKed")
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	<-srv.HalfClosed()

	reqs := srv.Requests()
	want := []struct {
		version, nonce string
		nack           bool
	}{{"", "", false}, {"", "n1", true}, {"v1", "n1", false}, {"v2", "n2", false}}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d: %v", len(reqs), len(want), reqs)
	}
	for i, w := range want {
		r := reqs[i]
		if r.GetTypeUrl() != seType || r.GetVersionInfo() != w.version || r.GetResponseNonce() != w.nonce ||
			(r.GetErrorDetail() != nil) != w.nack || r.GetNode().GetId() != "test-node" {
			t.Errorf("request %d = %v, want version %q nonce %q nack %v", i, r, w.version, w.nonce, w.nack)
		}
	}
}

func TestDeltaStreamRequestSequence(t *testing.T) {
	a1 := xdsclienttest.MCPResource(t, "ns/a", "", time.Time{}, nil, serviceEntry("a"))
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{Delta: map[string][]*discoveryv3.DeltaDiscoveryResponse{
		seType: {
			{TypeUrl: seType, Nonce: "d1", Resources: []*discoveryv3.Resource{{Name: "ns/a", Version: "7", Resource: a1}, {Name: "ns/b"}}},
			{TypeUrl: seType, Nonce: "d2", RemovedResources: []string{"ns/a"}},
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := xdsclient.OpenDelta(ctx, xdsclienttest.Dial(t, srv.Addr), xdsclient.NewNode("n"), []string{seType})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := d.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Resources) != 1 || r1.Resources[0].Version != "7" || len(r1.Errors) != 1 || r1.Errors[0].Name != "ns/b" {
		t.Fatalf("response 1 = %+v", r1)
	}
	if err := d.ACK(r1); err != nil {
		t.Fatal(err)
	}
	r2, err := d.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.Removed) != 1 || r2.Removed[0] != "ns/a" {
		t.Fatalf("response 2 = %+v", r2)
	}
	if err := d.ACK(r2); err != nil {
		t.Fatal(err)
	}
	<-srv.AllAcked()
	reqs := srv.DeltaRequests()
	if len(reqs) != 3 || len(reqs[0].GetResourceNamesSubscribe()) != 0 || reqs[0].GetResponseNonce() != "" ||
		reqs[1].GetResponseNonce() != "d1" || reqs[2].GetResponseNonce() != "d2" {
		t.Errorf("delta requests = %v", reqs)
	}
}
