// The protoc plugins scripts/proto.sh runs, pinned with a committed go.sum so that building them
// asks the module proxy only for .mod and .zip files (see scripts/gofetch.sh). Keep
// google.golang.org/protobuf at the version the main module requires (scripts/proto.sh checks).
module galleon-tools-protoc-gen

go 1.26.7

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
