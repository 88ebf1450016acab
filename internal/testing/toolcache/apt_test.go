package toolcache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeApt puts an apt-get (and a sudo) on PATH that log their arguments to a file; apt-get
// install fails until update ran when failFirst, and always when failAlways.
func fakeApt(t *testing.T, failFirst, failAlways bool) (calls string) {
	t.Helper()
	bin := t.TempDir()
	calls = filepath.Join(bin, "calls")
	apt := "#!/bin/sh\necho \"apt-get $*\" >>" + calls + "\n"
	if failAlways {
		apt += "[ \"$1\" = install ] && exit 100\n"
	}
	if failFirst {
		apt += "[ \"$1\" = install ] && [ ! -e " + bin + "/updated ] && exit 100\n[ \"$1\" = update ] && : >" + bin + "/updated\n"
	}
	apt += "echo apt says hello\nexit 0\n"
	sudo := "#!/bin/sh\necho \"sudo $*\" >>" + calls + "\nexec \"$@\"\n"
	for name, body := range map[string]string{"apt-get": apt, "sudo": sudo} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return calls
}

func readCalls(t *testing.T, calls string) string {
	t.Helper()
	b, _ := os.ReadFile(calls)
	return string(b)
}

func TestAptInstallUpdatesOnlyWhenTheFirstInstallFails(t *testing.T) {
	calls := fakeApt(t, false, false)
	var progress bytes.Buffer
	if err := aptInstall(context.Background(), &progress, true, "zk", "ZooKeeper", "hint", []string{"zookeeper", "x"}); err != nil {
		t.Fatal(err)
	}
	if got, want := readCalls(t, calls), "apt-get install -y -qq --no-install-recommends zookeeper x\n"; got != want {
		t.Errorf("root, install works: calls\n%s\nwant\n%s", got, want)
	}
	out := progress.String()
	for _, want := range []string{"zk: installing ZooKeeper: apt-get install -y --no-install-recommends zookeeper x ...\n", "apt says hello\n", "zk: installed zookeeper x in "} {
		if !strings.Contains(out, want) {
			t.Errorf("progress %q lacks %q", out, want)
		}
	}

	calls = fakeApt(t, true, false)
	if err := aptInstall(context.Background(), &progress, false, "zk", "ZooKeeper", "hint", []string{"zookeeper"}); err != nil {
		t.Fatal(err)
	}
	want := "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper\napt-get install -y -qq --no-install-recommends zookeeper\n" +
		"sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq\napt-get update -qq\n" +
		"sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper\napt-get install -y -qq --no-install-recommends zookeeper\n"
	if got := readCalls(t, calls); got != want {
		t.Errorf("not root, first install fails: calls\n%s\nwant\n%s", got, want)
	}
}

func TestAptInstallFailureIsOneLine(t *testing.T) {
	fakeApt(t, false, true)
	var progress bytes.Buffer
	err := aptInstall(context.Background(), &progress, true, "zk", "ZooKeeper", "install it by hand", []string{"zookeeper"})
	want := "apt-get could not install zookeeper (its output is above); tried: apt-get install, apt-get update, apt-get install; do: install it by hand"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestAptInstallWithoutAptOrSudo(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // neither apt-get nor sudo
	err := aptInstall(context.Background(), &bytes.Buffer{}, false, "zk", "ZooKeeper", "do this", []string{"zookeeper"})
	if err == nil || err.Error() != "ZooKeeper is missing and this is not root (no sudo): do this" {
		t.Errorf("not root, no sudo: %v", err)
	}
	err = aptInstall(context.Background(), &bytes.Buffer{}, true, "zk", "ZooKeeper", "do this", []string{"zookeeper"})
	if err == nil || err.Error() != "ZooKeeper is missing and apt-get is not available: do this" {
		t.Errorf("root, no apt-get: %v", err)
	}
}
