// Package treerules holds the tests that keep the tree's shape: imports run one way only
// (cmd -> daemon -> internal/server -> internal/* -> registry -> model), Galleon's own adapters
// use nothing a partner cannot, and an adapter's functions stay small enough to read.
// It has no code of its own; `go test ./internal/testing/treerules` runs the rules.
package treerules
