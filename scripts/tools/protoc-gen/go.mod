// The protoc plugins `devtool proto` runs, pinned with a committed go.sum so that building them
// asks the module proxy only for .mod and .zip files (see internal/testing/toolcache). Keep
// google.golang.org/protobuf at the version the main module requires (`devtool proto` checks).
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
