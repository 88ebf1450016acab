// The image writer of `devtool images` (main.go, image.go; driven by internal/testing/imagebuild)
// and the test of the images it writes (images_test.go), pinned with a committed go.sum so that
// building them asks the module proxy only for .mod and .zip files (see internal/testing/toolcache).
module galleon-tools-images

go 1.26.7

require (
	github.com/google/go-containerregistry v0.22.1
	go.yaml.in/yaml/v3 v3.0.4
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
