package mcpv1alpha1_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	istiomcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

const conflictEnv = "GOLANG_PROTOBUF_REGISTRATION_CONFLICT"

// TestMain makes sure a registration conflict between this package and istio.io/api (both
// register types in the proto package istio.mcp.v1alpha1) fails the tests: the registry checks
// for conflicts at init, before TestMain runs, so a policy other than "panic" in the environment
// (where "warn" would only log) is replaced by re-running the test binary with it set to "panic".
func TestMain(m *testing.M) {
	if os.Getenv(conflictEnv) != "panic" {
		exe, err := os.Executable()
		if err != nil {
			panic(err)
		}
		cmd := exec.Command(exe, os.Args[1:]...)
		cmd.Env = append(os.Environ(), conflictEnv+"=panic")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				os.Exit(ee.ExitCode())
			}
			panic(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The registry holds one istio.mcp.v1alpha1.Resource, istio.io/api's, and ours refers to it.
func TestRegistryShared(t *testing.T) {
	fd, err := protoregistry.GlobalFiles.FindFileByPath("mcp/v1alpha1/mcp.proto")
	if err != nil {
		t.Fatalf("mcp/v1alpha1/mcp.proto not registered: %v", err)
	}
	if fd != mcp.File_mcp_v1alpha1_mcp_proto {
		t.Fatalf("registered mcp/v1alpha1/mcp.proto is not Galleon's")
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName("istio.mcp.v1alpha1.Resource")
	if err != nil {
		t.Fatal(err)
	}
	if mt.Descriptor() != (&istiomcp.Resource{}).ProtoReflect().Descriptor() {
		t.Fatalf("istio.mcp.v1alpha1.Resource in the registry is not istio.io/api's")
	}
	field := (&mcp.Resources{}).ProtoReflect().Descriptor().Fields().ByName("resources")
	if field.Message() != mt.Descriptor() {
		t.Fatalf("Resources.resources is %v, want istio.io/api's Resource", field.Message().FullName())
	}
	for _, name := range []protoreflect.FullName{
		"istio.mcp.v1alpha1.SinkNode", "istio.mcp.v1alpha1.RequestResources",
		"istio.mcp.v1alpha1.Resources", "istio.mcp.v1alpha1.Metadata",
	} {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Wire compatibility with istio.io/api v1.22.0 mcp/v1alpha1/mcp.proto (what Istio 1.1 - 1.8 speak):
// package, message, field names, numbers, kinds and cardinality, service and method names.
func TestWireCompatibility(t *testing.T) {
	type field struct {
		name     protoreflect.Name
		num      protoreflect.FieldNumber
		kind     protoreflect.Kind
		repeated bool   // list (maps are checked through isMap)
		isMap    bool   // map<string,string>
		msg      string // message type full name, for message fields
	}
	str := protoreflect.StringKind
	msg := protoreflect.MessageKind
	want := map[protoreflect.FullName][]field{
		"istio.mcp.v1alpha1.SinkNode": {
			{name: "id", num: 1, kind: str},
			{name: "annotations", num: 2, kind: msg, isMap: true},
		},
		"istio.mcp.v1alpha1.RequestResources": {
			{name: "sink_node", num: 1, kind: msg, msg: "istio.mcp.v1alpha1.SinkNode"},
			{name: "collection", num: 2, kind: str},
			{name: "initial_resource_versions", num: 3, kind: msg, isMap: true},
			{name: "response_nonce", num: 4, kind: str},
			{name: "error_detail", num: 5, kind: msg, msg: "google.rpc.Status"},
			{name: "incremental", num: 6, kind: protoreflect.BoolKind},
		},
		"istio.mcp.v1alpha1.Resources": {
			{name: "system_version_info", num: 1, kind: str},
			{name: "collection", num: 2, kind: str},
			{name: "resources", num: 3, kind: msg, repeated: true, msg: "istio.mcp.v1alpha1.Resource"},
			{name: "removed_resources", num: 4, kind: str, repeated: true},
			{name: "nonce", num: 5, kind: str},
			{name: "incremental", num: 6, kind: protoreflect.BoolKind},
		},
	}
	for msgName, fields := range want {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(msgName)
		if err != nil {
			t.Fatalf("%s: %v", msgName, err)
		}
		md := mt.Descriptor()
		if md.ParentFile() != mcp.File_mcp_v1alpha1_mcp_proto {
			t.Errorf("%s is registered by %s, want Galleon's mcp/v1alpha1/mcp.proto", msgName, md.ParentFile().Path())
		}
		if got := md.Fields().Len(); got != len(fields) {
			t.Errorf("%s has %d fields, want %d", msgName, got, len(fields))
		}
		for _, f := range fields {
			fd := md.Fields().ByName(f.name)
			if fd == nil {
				t.Errorf("%s.%s missing", msgName, f.name)
				continue
			}
			if fd.Number() != f.num || fd.Kind() != f.kind || fd.IsMap() != f.isMap ||
				(fd.IsList() != f.repeated) || fd.HasPresence() != (f.kind == msg && !f.repeated && !f.isMap) {
				t.Errorf("%s.%s = #%d %v list=%v map=%v, want #%d %v list=%v map=%v",
					msgName, f.name, fd.Number(), fd.Kind(), fd.IsList(), fd.IsMap(), f.num, f.kind, f.repeated, f.isMap)
			}
			if f.isMap && (fd.MapKey().Kind() != str || fd.MapValue().Kind() != str) {
				t.Errorf("%s.%s is not map<string,string>", msgName, f.name)
			}
			if f.msg != "" && string(fd.Message().FullName()) != f.msg {
				t.Errorf("%s.%s is %s, want %s", msgName, f.name, fd.Message().FullName(), f.msg)
			}
		}
	}

	services := mcp.File_mcp_v1alpha1_mcp_proto.Services()
	if services.Len() != 2 {
		t.Errorf("%d services, want 2", services.Len())
	}
	for _, s := range []struct {
		service  protoreflect.FullName
		in, out  protoreflect.FullName
		fullName string
	}{
		{"istio.mcp.v1alpha1.ResourceSource", "istio.mcp.v1alpha1.RequestResources", "istio.mcp.v1alpha1.Resources",
			mcp.ResourceSource_EstablishResourceStream_FullMethodName},
		{"istio.mcp.v1alpha1.ResourceSink", "istio.mcp.v1alpha1.Resources", "istio.mcp.v1alpha1.RequestResources",
			mcp.ResourceSink_EstablishResourceStream_FullMethodName},
	} {
		sd := services.ByName(s.service.Name())
		if sd == nil || sd.FullName() != s.service {
			t.Errorf("service %s missing", s.service)
			continue
		}
		if sd.Methods().Len() != 1 {
			t.Errorf("%s has %d methods, want 1", s.service, sd.Methods().Len())
		}
		m := sd.Methods().ByName("EstablishResourceStream")
		if m == nil || m.Input().FullName() != s.in || m.Output().FullName() != s.out ||
			!m.IsStreamingClient() || !m.IsStreamingServer() {
			t.Errorf("%s.EstablishResourceStream is not (stream %s) returns (stream %s)", s.service, s.in, s.out)
		}
		if want := "/" + string(s.service) + "/EstablishResourceStream"; s.fullName != want {
			t.Errorf("method path %q, want %q", s.fullName, want)
		}
	}
}

func sampleResources(t *testing.T) *mcp.Resources {
	t.Helper()
	body, err := anypb.New(&networking.ServiceEntry{
		Hosts:      []string{"api.example.com"},
		Ports:      []*networking.ServicePort{{Number: 443, Name: "https", Protocol: "TLS"}},
		Location:   networking.ServiceEntry_MESH_EXTERNAL,
		Resolution: networking.ServiceEntry_DNS,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &mcp.Resources{
		SystemVersionInfo: "v1",
		Collection:        "istio/networking/v1alpha3/serviceentries",
		Resources: []*istiomcp.Resource{{
			Metadata: &istiomcp.Metadata{
				Name:        "default/api",
				Version:     "abc123",
				CreateTime:  timestamppb.New(time.Unix(1700000000, 0)),
				Labels:      map[string]string{"app": "api"},
				Annotations: map[string]string{"galleon.io/source": "file"},
			},
			Body: body,
		}},
		RemovedResources: []string{"default/old"},
		Nonce:            "n1",
		Incremental:      true,
	}
}

func TestRoundTrip(t *testing.T) {
	in := sampleResources(t)
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := &mcp.Resources{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Fatalf("round trip changed the message:\n in: %v\nout: %v", in, out)
	}
	se := &networking.ServiceEntry{}
	if err := out.GetResources()[0].GetBody().UnmarshalTo(se); err != nil {
		t.Fatal(err)
	}
	if se.GetHosts()[0] != "api.example.com" {
		t.Fatalf("body: %v", se)
	}

	req := &mcp.RequestResources{
		SinkNode:                &mcp.SinkNode{Id: "sink-1", Annotations: map[string]string{"zone": "a"}},
		Collection:              "istio/networking/v1alpha3/serviceentries",
		InitialResourceVersions: map[string]string{"default/api": "abc123"},
		ResponseNonce:           "n1",
		ErrorDetail:             &rpcstatus.Status{Code: 3, Message: "invalid"},
		Incremental:             true,
	}
	b, err = proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	gotReq := &mcp.RequestResources{}
	if err := proto.Unmarshal(b, gotReq); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(req, gotReq) {
		t.Fatalf("round trip changed the request:\n in: %v\nout: %v", req, gotReq)
	}
}

type source struct {
	mcp.UnimplementedResourceSourceServer
	resp *mcp.Resources
}

func (s *source) EstablishResourceStream(stream mcp.ResourceSource_EstablishResourceStreamServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	resp := proto.Clone(s.resp).(*mcp.Resources)
	resp.Collection = req.GetCollection()
	return stream.Send(resp)
}

// The generated gRPC code works end to end: a sink subscribes over ResourceSource and receives
// the Resources.
func TestResourceSourceStream(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	mcp.RegisterResourceSourceServer(srv, &source{resp: sampleResources(t)})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&mcp.RequestResources{SinkNode: &mcp.SinkNode{Id: "sink-1"}, Collection: "c1"}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := sampleResources(t)
	want.Collection = "c1"
	if !proto.Equal(resp, want) {
		t.Fatalf("got %v, want %v", resp, want)
	}
}
