package wire

import (
	"errors"
	"strings"
	"testing"
)

// regOf builds a registry of instances "APP/id/STATUS" (servable) and skipped "-APP/id/STATUS".
func regOf(specs ...string) *Applications {
	a := &Applications{VersionsDelta: -1}
	idx := map[string]int{}
	for _, spec := range specs {
		skipped := spec[0] == '-'
		if skipped {
			spec = spec[1:]
		}
		parts := strings.SplitN(spec, "/", 3)
		app, id, status := parts[0], parts[1], parts[2]
		if skipped {
			a.Skipped = append(a.Skipped, Skipped{App: app, InstanceID: id, Status: status, Reason: ReasonAddress, Err: bad(ReasonAddress, errTest)})
			continue
		}
		in := Instance{InstanceID: id, App: app, IPAddr: "10.0.0.1", Port: Port{80, true}, Status: status, OverriddenStatus: StatusUnknown}
		i, ok := idx[app]
		if !ok {
			i = len(a.Apps)
			idx[app] = i
			a.Apps = append(a.Apps, Application{Name: app})
		}
		a.Apps[i].Instances = append(a.Apps[i].Instances, in)
	}
	return a
}

var errTest = errors.New("test")

func TestHashcode(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  *Applications
		want string
	}{
		{"nil", nil, ""},
		{"empty", regOf(), ""},
		{"one", regOf("A/1/UP"), "UP_1_"},
		// The example of the issue and of Netflix's Applications: statuses in name order
		// across all applications.
		{"several apps and statuses", regOf("A/1/UP", "A/2/UP", "B/1/OUT_OF_SERVICE", "C/1/DOWN", "C/2/UP", "C/3/OUT_OF_SERVICE", "D/1/UP", "D/2/UP"),
			"DOWN_1_OUT_OF_SERVICE_2_UP_5_"},
		{"all five", regOf("A/1/UP", "A/2/DOWN", "A/3/STARTING", "A/4/OUT_OF_SERVICE", "A/5/UNKNOWN"),
			"DOWN_1_OUT_OF_SERVICE_1_STARTING_1_UNKNOWN_1_UP_1_"},
		{"skipped count under their status", regOf("A/1/UP", "-A/2/UP", "-B/1/DOWN"), "DOWN_1_UP_2_"},
		{"a skipped unknown status counts as listed", regOf("A/1/UP", "-A/2/BOGUS"), "BOGUS_1_UP_1_"},
		{"counts over 9 (not sorted as strings)", regOf("A/1/UP", "A/2/UP", "A/3/UP", "A/4/UP", "A/5/UP", "A/6/UP", "A/7/UP", "A/8/UP", "A/9/UP", "A/10/UP", "A/11/DOWN"),
			"DOWN_1_UP_10_"},
	} {
		if got := Hashcode(tc.reg); got != tc.want {
			t.Errorf("%s: Hashcode = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := HashcodeOf(map[string]int{"UP": 2, "DOWN": 0, "STARTING": -1}); got != "UP_2_" {
		t.Errorf("zero and negative counts: %q", got)
	}
	// Overrides: the status as served counts, not overriddenstatus.
	r := regOf("A/1/OUT_OF_SERVICE")
	r.Apps[0].Instances[0].OverriddenStatus = StatusOutOfService
	r2 := regOf("A/1/UP")
	r2.Apps[0].Instances[0].OverriddenStatus = StatusOutOfService // an override not applied yet
	if Hashcode(r) != "OUT_OF_SERVICE_1_" || Hashcode(r2) != "UP_1_" {
		t.Errorf("overrides: %q, %q", Hashcode(r), Hashcode(r2))
	}
}
