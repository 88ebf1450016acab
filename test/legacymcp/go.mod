module github.com/galleon-mesh/galleon/test/legacymcp

go 1.26

require (
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240314234333-6e1732d8331c
	google.golang.org/grpc v1.62.1
	istio.io/api v1.22.0
)

require (
	github.com/golang/protobuf v1.5.4 // indirect
	golang.org/x/net v0.22.0 // indirect
	golang.org/x/sys v0.18.0 // indirect
	golang.org/x/text v0.14.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20240318140521-94a12d6c2237 // indirect
	google.golang.org/protobuf v1.33.0 // indirect
)
