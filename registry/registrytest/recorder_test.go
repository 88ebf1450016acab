package registrytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
)

func svc(name string, ids ...string) model.Service {
	s := model.Service{Namespace: "ns", Name: name, Hosts: []string{name + ".ns.test"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}}}
	for _, id := range ids {
		s.Instances = append(s.Instances, model.Instance{ID: id, Address: "10.0.0.1"})
	}
	return s
}

func key(name string) model.ServiceKey { return model.ServiceKey{Namespace: "ns", Name: name} }

func TestRecorderState(t *testing.T) {
	var r Recorder // the zero value works
	r.Unreachable(errors.New("down"))
	if r.Synced() || r.UnreachableError() == nil {
		t.Fatalf("synced %v, unreachable %v", r.Synced(), r.UnreachableError())
	}
	r.Replace([]model.Service{svc("a"), svc("b")})
	r.Unreachable(nil)
	r.Update(svc("c", "i1"))
	r.Delete(key("a"))
	r.Rejected("file.yaml:3", errors.New("bad"))
	st := r.State()
	if _, ok := st[key("a")]; ok || len(st) != 2 || len(st[key("c")].Instances) != 1 {
		t.Errorf("state = %v", st)
	}
	if !r.Synced() || r.UnreachableError() != nil || r.Len() != 6 {
		t.Errorf("synced %v, unreachable %v, len %d", r.Synced(), r.UnreachableError(), r.Len())
	}
	want := []string{
		"Unreachable(down)",
		"Replace(2 services: ns/a, ns/b)",
		"Unreachable(<nil>)",
		"Update(ns/c)",
		"Delete(ns/a)",
		`Rejected("file.yaml:3", bad)`,
	}
	for i, e := range r.Events() {
		if e.String() != want[i] {
			t.Errorf("event %d = %q, want %q", i, e, want[i])
		}
	}
	r.Replace(nil)
	if len(r.State()) != 0 {
		t.Errorf("an empty Replace left %v", r.State())
	}
	if err := r.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestRecorderWaitFor(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Replace(nil)
		for i := range 20 {
			r.Update(svc(fmt.Sprintf("s%d", i)))
		}
	}()
	start := time.Now()
	r.WaitFor(t, 10*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 20 })
	r.WaitForEvents(t, 10*time.Second, func(events []Event) bool { return len(events) == 21 })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("WaitFor took %v", d)
	}
	wg.Wait()

	// A condition that never holds fails the test with the calls.
	ft := &fakeTB{TB: t}
	r.WaitFor(ft, 20*time.Millisecond, func(map[model.ServiceKey]model.Service) bool { return false })
	if !strings.Contains(ft.msg, "within 20ms") || !strings.Contains(ft.msg, "#20 Update(ns/s19)") {
		t.Errorf("failure message: %s", ft.msg)
	}
}

// fakeTB captures Fatalf.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestRecorderCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(r *Recorder)
		want string
	}{
		{"update before replace", func(r *Recorder) { r.Update(svc("a")); r.Replace(nil) }, "before the first Replace"},
		{"delete before replace", func(r *Recorder) { r.Delete(key("a")) }, "before the first Replace"},
		{"rejected and unreachable before replace are fine", func(r *Recorder) {
			r.Rejected("x", errors.New("bad"))
			r.Unreachable(errors.New("down"))
			r.Replace(nil)
		}, ""},
		{"empty record", func(r *Recorder) { r.Rejected("", errors.New("bad")) }, "empty record"},
		{"nil error", func(r *Recorder) { r.Rejected("x", nil) }, "nil error for a record never rejected"},
		{"cleared", func(r *Recorder) { r.Rejected("x", errors.New("bad")); r.Rejected("x", nil) }, ""},
		{"cleared twice", func(r *Recorder) { r.Rejected("x", errors.New("bad")); r.Rejected("x", nil); r.Rejected("x", nil) }, "never rejected"},
		{"no name", func(r *Recorder) { r.Replace([]model.Service{svc("")}) }, "empty Namespace or Name"},
		{"duplicate key", func(r *Recorder) { r.Replace([]model.Service{svc("a"), svc("a")}) }, "listed twice"},
		{"duplicate instance", func(r *Recorder) { r.Replace([]model.Service{svc("a", "i", "i")}) }, `two instances with ID "i"`},
		{"modified slice", func(r *Recorder) {
			all := []model.Service{svc("a")}
			r.Replace(all)
			all[0].Name = "b"
		}, `services[0].Name: was "a", now "b"`},
		{"modified nested map", func(r *Recorder) {
			s := svc("a", "i")
			s.Instances[0].Labels = map[string]string{"v": "1"}
			r.Replace(nil)
			r.Update(s)
			s.Instances[0].Labels["v"] = "2"
		}, `services[0].Instances[0].Labels["v"]: was "1", now "2"`},
		{"instance appended in place", func(r *Recorder) {
			all := []model.Service{svc("a", "i")}
			r.Replace(all)
			all[0].Instances = append(all[0].Instances, model.Instance{ID: "j", Address: "10.0.0.2"})
		}, "services[0].Instances: was"},
		{"degraded", func(r *Recorder) { r.Degraded("dc2", errors.New("down")); r.Degraded("dc2", nil) }, ""},
		{"degraded without a part", func(r *Recorder) { r.Degraded("", errors.New("down")) }, "empty part"},
		{"back without down", func(r *Recorder) { r.Degraded("dc2", nil) }, "never reported down"},
		{"late", func(r *Recorder) { r.Replace(nil); r.Close(); r.Unreachable(nil) }, "after Run returned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder()
			tc.do(r)
			err := r.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	base := model.Service{
		Namespace: "ns", Name: "a",
		Hosts: []string{"b.test", "a.test"},
		Ports: []model.Port{{Number: 90}, {Number: 80, Protocol: "http", Name: "http"}},
		Instances: []model.Instance{
			{ID: "2", Address: "10.0.0.2", Ports: map[uint32]uint32{80: 80}},
			{ID: "1", Address: "10.0.0.1", Labels: map[string]string{}},
		},
		Labels: map[string]string{},
	}
	same := model.Service{
		Namespace: "ns", Name: "a",
		Hosts: []string{"a.test", "b.test"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP, Name: "http"}, {Number: 90, Protocol: model.ProtocolTCP, Name: "tcp-90"}},
		Instances: []model.Instance{
			{ID: "1", Address: "10.0.0.1"},
			{ID: "2", Address: "10.0.0.2"},
		},
	}
	if d := Diff(base, same); d != "" {
		t.Errorf("equal by meaning, but Diff says:\n%s", d)
	}

	other := same.Clone()
	other.Instances[0].Health = model.Draining
	other.Instances = other.Instances[:1]
	other.Instances = append(other.Instances, model.Instance{ID: "3", Address: "10.0.0.3"})
	other.Resolution = model.ResolutionDNS
	d := Diff(base, other)
	for _, want := range []string{
		`Resolution: want ResolutionAuto, got ResolutionDNS`,
		`instance "1": Health: want Healthy, got Draining`,
		`instance "2": missing`,
		`instance "3": unexpected`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("Diff lacks %q:\n%s", want, d)
		}
	}
	if strings.Count(d, "\n") != 3 {
		t.Errorf("Diff has extra lines:\n%s", d)
	}
}

func TestFieldFilter(t *testing.T) {
	for _, bad := range []string{"Nope", "Name", "Namespace", "Instances.ID", "Instances.Nope"} {
		if _, err := newFieldFilter([]string{bad}); err == nil {
			t.Errorf("IgnoreFields(%q) accepted", bad)
		}
	}
	f, err := newFieldFilter([]string{"Labels", "Instances.Health", "Instances.Labels"})
	if err != nil {
		t.Fatal(err)
	}
	s := svc("a", "i1", "i2")
	s.Labels = map[string]string{"x": "y"}
	s.Instances[1].Health = model.Unhealthy
	s.Instances[1].Labels = map[string]string{"x": "y"}
	before := s.Clone()
	got := f.apply(s)
	if got.Labels != nil || got.Instances[1].Health != model.Healthy || got.Instances[1].Labels != nil || got.Instances[1].Address != "10.0.0.1" {
		t.Errorf("apply = %+v", got)
	}
	if Diff(before, s) != "" || s.Instances[1].Health != model.Unhealthy {
		t.Error("apply modified its argument")
	}
}

func TestLabelledGoroutines(t *testing.T) {
	label := newRunLabel()
	stop := make(chan struct{})
	defer close(stop)
	go func() { <-stop }() // not the run's: no label
	childDone := make(chan struct{})
	runDone := make(chan struct{})
	go func() {
		withRunLabel(context.Background(), label, func(context.Context) {
			go func() { // a grandchild of the labelled call inherits the label
				<-childDone
			}()
		})
		// pprof.Do has put the goroutine's labels back: from here on only the grandchild
		// carries the run's label. (Waiting for a signal from inside the labelled call
		// raced with that call's return: two labelled goroutines, now and then.)
		close(runDone)
	}()
	<-runDone
	left := waitLabelled(label, nil, 0)
	if len(left) != 1 || !strings.HasPrefix(left[0], "1 goroutine(s):") || !strings.Contains(left[0], "TestLabelledGoroutines") {
		t.Fatalf("labelled goroutines: %q", left)
	}
	if left := labelled(label, []string{"TestLabelledGoroutines.func"}); len(left) != 0 {
		t.Errorf("ignored goroutine listed: %q", left)
	}
	if left := labelled(newRunLabel(), nil); len(left) != 0 {
		t.Errorf("another run's label matched: %q", left)
	}
	close(childDone)
	if left := waitLabelled(label, nil, 5*time.Second); len(left) != 0 {
		t.Errorf("goroutine did not end: %q", left)
	}
}
