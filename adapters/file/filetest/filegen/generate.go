// Package filegen writes the file registry of the load tool and the start
// benchmarks: Services x Instances in YAML files (see examples/file/README.md),
// plus one target service whose first instance a load run moves, one
// endpoint-only change at a time.
//
// It is a package of its own, not part of filetest, because the file adapter's
// in-package tests read what it writes and filetest imports the adapter.
//
// Its addresses are the ones every generated registry uses (the ZooKeeper and
// Eureka generators of the bench module too): InstanceAddr for the generated
// services, MoverAddr for the instance a run moves.
package filegen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TargetFile is the registry file a load run rewrites: one service whose
// first instance moves on every change, so each change is one
// endpoint-only update of one ServiceEntry.
const TargetFile = "zz-load-target.yaml"

// targetIndex numbers the target among the generated services for its
// addresses: above any generated service's (at most 250 x 250 - 1 of them).
const targetIndex = 250*250 - 1

// GenerateConfig sizes a generated file registry.
type GenerateConfig struct {
	Dir       string
	Services  int
	Instances int
	// PerFile is how many services each file holds; default 500.
	PerFile int
	// Namespace of every service; default DefaultNamespace. Registries generated with
	// different ones hold no host in common (galleon-bench fleet serves several side by side).
	Namespace string
}

// DefaultNamespace is the namespace Generate gives services by default.
const DefaultNamespace = "load"

// Generate writes a file registry (see examples/file/README.md) of
// Services x Instances, plus the target service the run changes.
func Generate(cfg GenerateConfig) error {
	if cfg.Services < 1 || cfg.Instances < 1 {
		return fmt.Errorf("generate: --services and --instances must be at least 1")
	}
	if cfg.PerFile <= 0 {
		cfg.PerFile = 500
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	for first := 0; first < cfg.Services; first += cfg.PerFile {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := first; i < min(first+cfg.PerFile, cfg.Services); i++ {
			writeService(&b, cfg.Namespace, fmt.Sprintf("svc-%05d", i), i, cfg.Instances, 0)
		}
		name := filepath.Join(cfg.Dir, fmt.Sprintf("services-%05d.yaml", first/cfg.PerFile))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return WriteTargetIn(cfg.Dir, cfg.Namespace, cfg.Instances, 0)
}

func writeService(b *strings.Builder, namespace, name string, i, instances, variant int) {
	fmt.Fprintf(b, "- name: %s\n  namespace: %s\n  ports: [{number: 8080, protocol: HTTP}]\n  labels: {app: %s}\n  instances:\n", name, namespace, name)
	for j := range instances {
		addr := InstanceAddr(i, j)
		if j == 0 && variant > 0 {
			addr = MoverAddr(variant)
		}
		fmt.Fprintf(b, "  - {id: %s-%d, address: %s, labels: {app: %s, version: v1}, locality: us-east1/us-east1-b}\n", name, j, addr, name)
	}
}

// WriteTarget rewrites TargetFile in dir with the target's first instance at
// MoverAddr(variant) (variant 0: where Generate put it). It replaces the file
// atomically (temp file + rename), as a careful operator or a
// config-management tool would.
func WriteTarget(dir string, instances, variant int) error {
	return WriteTargetIn(dir, DefaultNamespace, instances, variant)
}

// WriteTargetIn is WriteTarget for a registry generated in namespace.
func WriteTargetIn(dir, namespace string, instances, variant int) error {
	var b strings.Builder
	b.WriteString("services:\n")
	writeService(&b, namespace, "load-target", targetIndex, instances, variant)
	tmp := filepath.Join(dir, "."+TargetFile+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, TargetFile))
}

// InstanceAddr is the address of instance j of generated service i.
func InstanceAddr(i, j int) string { return fmt.Sprintf("10.%d.%d.%d", i/250%250, i%250, j+1) }

// MoverAddr is the address the moving instance has in variant v (1 to
// 250 x 250 - 1): 10.251 is used by nothing else, so the mover never
// collides with another instance.
func MoverAddr(v int) string { return fmt.Sprintf("10.251.%d.%d", v/250%250, v%250) }
