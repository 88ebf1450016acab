package filegen_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
)

func TestGenerateSplitsServicesIntoFiles(t *testing.T) {
	dir := t.TempDir()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: 25, Instances: 3, PerFile: 10}); err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "services-*.yaml"))
	if err != nil || len(paths) != 3 {
		t.Fatalf("25 services at 10 per file: files %v (%v), want 3", paths, err)
	}
	last, err := os.ReadFile(filepath.Join(dir, "services-00002.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(last), "- name: "); got != 5 {
		t.Errorf("the last file holds %d services, want 5:\n%s", got, last)
	}
	if want := "address: " + filegen.InstanceAddr(24, 2) + ","; !strings.Contains(string(last), want) {
		t.Errorf("the last file has no %q (instance 2 of service 24):\n%s", want, last)
	}
}

func TestWriteTargetMovesTheFirstInstance(t *testing.T) {
	dir := t.TempDir()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: 1, Instances: 2}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, filegen.TargetFile)
	before, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := filegen.WriteTarget(dir, 2, 7); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(before), filegen.MoverAddr(7)) || !strings.Contains(string(after), "load-target-0, address: "+filegen.MoverAddr(7)+",") {
		t.Errorf("variant 7 should put load-target-0 at %s; before:\n%s\nafter:\n%s", filegen.MoverAddr(7), before, after)
	}
	if strings.Count(string(before), "\n") != strings.Count(string(after), "\n") {
		t.Errorf("a move should change one address, not the target's size; before:\n%s\nafter:\n%s", before, after)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".*")); len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

func TestGenerateRefusesAnEmptyRegistry(t *testing.T) {
	err := filegen.Generate(filegen.GenerateConfig{Dir: t.TempDir(), Services: 0, Instances: 1})
	if err == nil || !strings.Contains(err.Error(), "--services") {
		t.Errorf("0 services: error %v, want one naming --services", err)
	}
}
