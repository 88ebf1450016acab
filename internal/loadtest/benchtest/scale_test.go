package benchtest

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/loadtest"
)

func TestBenchScaleFromEnv(t *testing.T) {
	for _, c := range []struct {
		services, sinks string
		want            loadtest.BenchScale
		wantErr         string // a variable the error names
	}{
		{"", "", loadtest.BenchScale{Services: loadtest.DefaultBenchServices, Sinks: loadtest.DefaultBenchSinks}, ""},
		{"50000", "100", loadtest.BenchScale{Services: 50000, Sinks: 100}, ""},
		{"1000", "", loadtest.BenchScale{Services: 1000, Sinks: loadtest.DefaultBenchSinks}, ""},
		{"10k", "", loadtest.BenchScale{}, loadtest.BenchServicesEnv},
		{"0", "", loadtest.BenchScale{}, loadtest.BenchServicesEnv},
		{"62751", "", loadtest.BenchScale{}, loadtest.BenchServicesEnv},
		{"", "-1", loadtest.BenchScale{}, loadtest.BenchSinksEnv},
	} {
		t.Setenv(loadtest.BenchServicesEnv, c.services)
		t.Setenv(loadtest.BenchSinksEnv, c.sinks)
		got, err := loadtest.BenchScaleFromEnv()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("services %q sinks %q: %v", c.services, c.sinks, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("services %q sinks %q: error %v, want one naming %s", c.services, c.sinks, err, c.wantErr)
		case got != c.want:
			t.Errorf("services %q sinks %q: %+v, want %+v", c.services, c.sinks, got, c.want)
		}
	}
}

// Every instance address of the largest data set is a valid IPv4 address,
// unique, and apart from where changed instances move.
func TestBenchServiceAddresses(t *testing.T) {
	seen := make(map[netip.Addr]string, loadtest.MaxBenchServices*loadtest.BenchInstances)
	for i := range loadtest.MaxBenchServices {
		for _, in := range loadtest.BenchService(i, 0).Instances {
			a, err := netip.ParseAddr(in.Address)
			if err != nil || !a.Is4() {
				t.Fatalf("%s: address %q is not IPv4 (%v)", in.ID, in.Address, err)
			}
			if other, ok := seen[a]; ok {
				t.Fatalf("%s and %s share %s", other, in.ID, a)
			}
			if a.As4()[1] == 251 {
				t.Fatalf("%s: %s is in 10.251.0.0/16, where changed instances move", in.ID, a)
			}
			seen[a] = in.ID
		}
	}
}
