package wire

import (
	"reflect"
	"slices"
	"testing"
)

// deltaOf is a delta of entries "ACTION APP/id/STATUS" (servable) or "ACTION -APP/id/STATUS"
// (skipped), with the given apps__hashcode.
func deltaOf(hash string, entries ...string) *Applications {
	d := &Applications{VersionsDelta: 9, AppsHashcode: hash}
	for _, e := range entries {
		var action, spec string
		for i := range e {
			if e[i] == ' ' {
				action, spec = e[:i], e[i+1:]
				break
			}
		}
		r := regOf(spec)
		if len(r.Skipped) > 0 {
			r.Skipped[0].ActionType = action
			d.Skipped = append(d.Skipped, r.Skipped[0])
			continue
		}
		in := r.Apps[0].Instances[0]
		in.ActionType = action
		found := false
		for i := range d.Apps {
			if d.Apps[i].Name == in.App {
				d.Apps[i].Instances = append(d.Apps[i].Instances, in)
				found = true
			}
		}
		if !found {
			d.Apps = append(d.Apps, Application{Name: in.App, Instances: []Instance{in}})
		}
	}
	return d
}

// served lists a registry's servable instances as "APP/id/STATUS", and its skipped ones with
// a leading '-'.
func served(a *Applications) []string {
	var out []string
	for _, app := range a.Apps {
		for _, in := range app.Instances {
			out = append(out, app.Name+"/"+in.InstanceID+"/"+in.Status)
		}
	}
	for _, s := range a.Skipped {
		out = append(out, "-"+s.App+"/"+s.InstanceID+"/"+s.Status)
	}
	return out
}

func TestApplyDelta(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cur        *Applications
		delta      *Applications
		want       []string
		changed    []string
		reconciled bool
		unapplied  int
	}{
		{name: "added to a new app",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_2_", "ADDED B/1/UP"),
			want: []string{"A/1/UP", "B/1/UP"}, changed: []string{"B"}, reconciled: true},
		{name: "added to an existing app",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_2_", "ADDED A/2/UP"),
			want: []string{"A/1/UP", "A/2/UP"}, changed: []string{"A"}, reconciled: true},
		{name: "modified in place",
			cur: regOf("A/1/UP", "A/2/UP"), delta: deltaOf("OUT_OF_SERVICE_1_UP_1_", "MODIFIED A/1/OUT_OF_SERVICE"),
			want: []string{"A/1/OUT_OF_SERVICE", "A/2/UP"}, changed: []string{"A"}, reconciled: true},
		{name: "modified, not known: added",
			cur: regOf("A/1/UP"), delta: deltaOf("DOWN_1_UP_1_", "MODIFIED A/2/DOWN"),
			want: []string{"A/1/UP", "A/2/DOWN"}, changed: []string{"A"}, reconciled: true},
		{name: "app names compare case-insensitively",
			cur: regOf("APP/1/UP"), delta: deltaOf("DOWN_1_", "MODIFIED app/1/DOWN"),
			want: []string{"APP/1/DOWN"}, changed: []string{"APP"}, reconciled: true},
		{name: "deleted; the emptied app goes",
			cur: regOf("A/1/UP", "B/1/UP"), delta: deltaOf("UP_1_", "DELETED B/1/UP"),
			want: []string{"A/1/UP"}, changed: []string{"B"}, reconciled: true},
		{name: "deleted, not known: nothing",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_1_", "DELETED A/9/UP", "DELETED Z/1/UP"),
			want: []string{"A/1/UP"}, reconciled: true},
		{name: "a replay changes nothing",
			cur: regOf("A/1/UP", "B/1/DOWN"), delta: deltaOf("DOWN_1_UP_1_", "ADDED A/1/UP", "MODIFIED B/1/DOWN"),
			want: []string{"A/1/UP", "B/1/DOWN"}, reconciled: true},
		{name: "empty delta",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_1_"),
			want: []string{"A/1/UP"}, reconciled: true},
		{name: "empty delta, server has more: not reconciled",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_2_"),
			want: []string{"A/1/UP"}, reconciled: false},
		{name: "nil registry",
			cur: nil, delta: deltaOf("UP_1_", "ADDED A/1/UP"),
			want: []string{"A/1/UP"}, changed: []string{"A"}, reconciled: true},
		// A servable instance that becomes malformed stops being served but is still counted;
		// a later valid MODIFIED brings it back.
		{name: "modified to malformed",
			cur: regOf("A/1/UP", "A/2/UP"), delta: deltaOf("UP_2_", "MODIFIED -A/1/UP"),
			want: []string{"A/2/UP", "-A/1/UP"}, changed: []string{"A"}, reconciled: true},
		{name: "malformed made valid",
			cur: regOf("A/2/UP", "-A/1/UP"), delta: deltaOf("UP_2_", "MODIFIED A/1/UP"),
			want: []string{"A/2/UP", "A/1/UP"}, changed: []string{"A"}, reconciled: true},
		{name: "malformed deleted",
			cur: regOf("A/2/UP", "-A/1/UP"), delta: deltaOf("UP_1_", "DELETED -A/1/UP"),
			want: []string{"A/2/UP"}, reconciled: true},
		{name: "malformed deleted by a valid entry",
			cur: regOf("A/2/UP", "-A/1/UP"), delta: deltaOf("UP_1_", "DELETED A/1/UP"),
			want: []string{"A/2/UP"}, reconciled: true},
		{name: "only malformed left: the app is not served",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_1_", "MODIFIED -A/1/UP"),
			want: []string{"-A/1/UP"}, changed: []string{"A"}, reconciled: true},
		{name: "unknown action: not applied, not reconciled",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_2_", "RENEWED A/2/UP"),
			want: []string{"A/1/UP"}, reconciled: false, unapplied: 1},
		{name: "no action (a full listing's instance without actionType)",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_2_", " A/2/UP"),
			want: []string{"A/1/UP"}, reconciled: false, unapplied: 1},
		{name: "malformed without an id: not applied",
			cur: regOf("A/1/UP"), delta: deltaOf("UP_2_", "ADDED -A//UP"),
			want: []string{"A/1/UP"}, reconciled: false, unapplied: 1},
		{name: "unkeyed skipped entries of the registry stay",
			cur: regOf("A/1/UP", "-A//UP"), delta: deltaOf("UP_3_", "ADDED A/2/UP"),
			want: []string{"A/1/UP", "A/2/UP", "-A//UP"}, changed: []string{"A"}, reconciled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *Applications
			if tc.cur != nil {
				before = tc.cur.Clone()
			}
			next, res := ApplyDelta(tc.cur, tc.delta)
			if got := served(next); !slices.Equal(got, tc.want) {
				t.Errorf("registry %v, want %v", got, tc.want)
			}
			if !slices.Equal(res.Changed, tc.changed) {
				t.Errorf("Changed %v, want %v", res.Changed, tc.changed)
			}
			if res.Reconciled != tc.reconciled || res.Hashcode != Hashcode(next) || len(res.Unapplied) != tc.unapplied {
				t.Errorf("Reconciled %v (hash %q vs the delta's %q), %d unapplied %v; want %v, %d",
					res.Reconciled, res.Hashcode, tc.delta.AppsHashcode, len(res.Unapplied), res.Unapplied, tc.reconciled, tc.unapplied)
			}
			for _, u := range res.Unapplied {
				if u.Reason == "" || u.Err == nil {
					t.Errorf("unapplied %+v without a reason", u)
				}
			}
			if next.VersionsDelta != 9 || next.AppsHashcode != tc.delta.AppsHashcode {
				t.Errorf("version %d, hashcode %q: want the delta's", next.VersionsDelta, next.AppsHashcode)
			}
			if tc.cur != nil && !reflect.DeepEqual(tc.cur, before) {
				t.Errorf("ApplyDelta changed its input:\n%+v\nwas\n%+v", tc.cur, before)
			}
			// The result agrees with Diff.
			if d := Diff(tc.cur, next); !slices.Equal(d, tc.changed) {
				t.Errorf("Diff %v, Changed %v", d, tc.changed)
			}
		})
	}
}

func TestApplyDeltaCounts(t *testing.T) {
	_, res := ApplyDelta(regOf("A/1/UP", "A/2/UP"), deltaOf("x", "ADDED B/1/UP", "MODIFIED A/1/DOWN", "DELETED A/2/UP", "MODIFIED -A/3/UP", "DELETED -A/4/UP"))
	if res.Added != 1 || res.Modified != 2 || res.Deleted != 2 || len(res.Skipped) != 1 || res.Skipped[0].InstanceID != "3" {
		t.Errorf("result %+v", res)
	}
	// A nil delta changes nothing.
	cur := regOf("A/1/UP")
	cur.AppsHashcode = "UP_1_"
	next, res := ApplyDelta(cur, nil)
	if !res.Reconciled || len(res.Changed) != 0 || !reflect.DeepEqual(served(next), served(cur)) {
		t.Errorf("nil delta: %+v", res)
	}
}

func TestDiff(t *testing.T) {
	a := regOf("A/1/UP", "A/2/UP", "B/1/UP", "C/1/UP")
	b := regOf("A/2/UP", "A/1/UP", "B/1/DOWN", "D/1/UP", "-C/1/UP")
	if got, want := Diff(a, b), []string{"B", "C", "D"}; !slices.Equal(got, want) {
		t.Errorf("Diff = %v, want %v (order of instances does not matter)", got, want)
	}
	// Only the action differs: the same registration.
	c := regOf("A/1/UP")
	c.Apps[0].Instances[0].ActionType = ActionModified
	if d := Diff(regOf("A/1/UP"), c); len(d) != 0 {
		t.Errorf("Diff over actionType: %v", d)
	}
	// Any other field differs.
	for _, f := range []func(*Instance){
		func(in *Instance) { in.IPAddr = "10.0.0.2" },
		func(in *Instance) { in.Metadata = map[string]string{"k": "v"} },
		func(in *Instance) { in.DataCenterInfo.Metadata = map[string]string{"availability-zone": "z"} },
		func(in *Instance) { in.LeaseInfo.LastRenewalTimestamp = 1 },
		func(in *Instance) { in.Port.Enabled = false },
		func(in *Instance) { in.LastUpdatedTimestamp = 1 },
		func(in *Instance) { in.OverriddenStatus = StatusDown },
	} {
		d := regOf("A/1/UP")
		f(&d.Apps[0].Instances[0])
		if got := Diff(regOf("A/1/UP"), d); !slices.Equal(got, []string{"A"}) {
			t.Errorf("Diff after a change: %v", got)
		}
	}
	if d := Diff(nil, nil); len(d) != 0 {
		t.Errorf("Diff(nil, nil) = %v", d)
	}
}
