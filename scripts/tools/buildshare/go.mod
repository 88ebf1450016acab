// The build-sharing model of `devtool build-sharing`: which packages the builds of `make test`
// compile that no earlier build compiled. Standard library only.
module github.com/galleon-mesh/galleon/scripts/tools/buildshare

go 1.26.7
