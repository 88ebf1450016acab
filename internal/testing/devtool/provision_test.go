package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestProvisionUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(context.Context, []string) error
		args []string
		want string
	}{
		{"build", runBuild, []string{"consul", "1.21.0"}, "consul 1.21.0 is not pinned here; this repository builds consul 1.22.6"},
		{"build", runBuild, []string{"istiod", "1.29.2"}, "build istiod builds every release"},
		{"build", runBuild, []string{"kubelet"}, "unknown tool kubelet"},
		{"path", runPath, []string{"pilot-discovery", "1.30.0"}, "unknown istiod release 1.30.0; known: 1.29.2 1.31-dev 1.30-b01690e"},
		{"zookeeper", runZooKeeper, []string{"start"}, "classpath|java"},
		{"lint", runLint, nil, "name the module directories"},
		{"proto", runProto, []string{"fix"}, "generate|check|tools"},
		{"tidy", runTidy, []string{"consul"}, "tidy polaris-server | pilot-discovery"},
		{"regen", runRegen, []string{"polaris-server"}, "regen consul|kube"},
	} {
		err := tc.run(context.Background(), tc.args)
		var ue usageError
		if !errors.As(err, &ue) || ue.exit != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v; want a usage error (exit 2) saying %q", tc.name, tc.args, err, tc.want)
		}
	}
}
