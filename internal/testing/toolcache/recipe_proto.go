package toolcache

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
)

// protocGen is the wrapper module that pins the protoc plugins.
const protocGen = "scripts/tools/protoc-gen"

// Protoc returns protoc and the include directory holding the well-known types
// (google/protobuf/*.proto) of its version, installing the Debian packages protobuf-compiler and
// libprotobuf-dev (Debian: protoc 3.21.12; needs root or sudo) when either is missing.
func Protoc(ctx context.Context) (protoc, include string, err error) {
	if protoc, include, err = findProtoc(); err == nil {
		return protoc, include, nil
	}
	if err := AptInstall(ctx, "proto", "protoc (with google/protobuf/*.proto)",
		"install protoc >= 3.21 with its google/protobuf/*.proto include files and put it on PATH, then run make again",
		"protobuf-compiler", "libprotobuf-dev"); err != nil {
		return "", "", err
	}
	if protoc, include, err = findProtoc(); err != nil {
		return "", "", fmt.Errorf("proto: protoc installed but %v", err)
	}
	return protoc, include, nil
}

// findProtoc is protoc on PATH and the include directory next to it (or a system one) that holds
// google/protobuf/any.proto.
func findProtoc() (protoc, include string, err error) {
	protoc, err = exec.LookPath("protoc")
	if err != nil {
		return "", "", errors.New("protoc is not on PATH")
	}
	for _, d := range []string{filepath.Join(filepath.Dir(protoc), "..", "include"), "/usr/include", "/usr/local/include"} {
		if fileExists(filepath.Join(d, "google", "protobuf", "any.proto")) {
			abs, err := filepath.Abs(d)
			if err != nil {
				return "", "", err
			}
			return protoc, abs, nil
		}
	}
	return "", "", errors.New("google/protobuf/any.proto not found")
}

// ProtocPlugins are the recipes of protoc-gen-go and protoc-gen-go-grpc at the versions
// scripts/tools/protoc-gen/go.mod pins (read from it: no network). The plugins' module must
// require the main module's google.golang.org/protobuf, or the generated code would not match the
// library it is compiled with.
func ProtocPlugins(root string) (gen, grpc Recipe, err error) {
	want, err := GoModRequire(root, "google.golang.org/protobuf")
	if err != nil {
		return Recipe{}, Recipe{}, fmt.Errorf("proto: %v", err)
	}
	tools := filepath.Join(root, protocGen)
	pinned, err := GoModRequire(tools, "google.golang.org/protobuf")
	if err != nil {
		return Recipe{}, Recipe{}, fmt.Errorf("proto: %v", err)
	}
	if want != pinned {
		return Recipe{}, Recipe{}, fmt.Errorf("proto: go.mod requires google.golang.org/protobuf %s but %s/go.mod pins %s: align them, run go mod tidy there, then make proto", want, protocGen, pinned)
	}
	grpcVersion, err := GoModRequire(tools, "google.golang.org/grpc/cmd/protoc-gen-go-grpc")
	if err != nil || grpcVersion == "" {
		return Recipe{}, Recipe{}, fmt.Errorf("proto: %s/go.mod does not require google.golang.org/grpc/cmd/protoc-gen-go-grpc (%v): restore it", protocGen, err)
	}
	plugin := func(pkg, module, version string) Recipe {
		name := filepath.Base(pkg)
		return Recipe{
			Name: name, Version: version, Make: "proto", ModDir: protocGen, Module: module, ModuleVersion: version,
			build: goBuild(pkg, "", "go build "+pkg+" from "+protocGen+"/go.sum",
				"retry later, or put "+name+" on PATH and edit the committed code by hand"),
		}
	}
	return plugin("google.golang.org/protobuf/cmd/protoc-gen-go", "google.golang.org/protobuf", pinned),
		plugin("google.golang.org/grpc/cmd/protoc-gen-go-grpc", "google.golang.org/grpc/cmd/protoc-gen-go-grpc", grpcVersion), nil
}
