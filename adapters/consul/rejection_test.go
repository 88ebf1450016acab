package consul

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// labelFromText is how the reason label was chosen before rejections
// carried it: from words in the message. The typed reasons must give the
// labels it gave for every message the mapping writes, so that dashboards
// see the same series.
func labelFromText(err error) rejectReason {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "address"):
		return reasonAddress
	case strings.Contains(msg, "port"):
		return reasonPort
	case strings.Contains(msg, "name"):
		return reasonName
	}
	return reasonOther
}

// TestRejectionReasons maps each kind of malformed record and checks the
// reason label its rejection is counted under.
func TestRejectionReasons(t *testing.T) {
	// Fails to execute for a service in Consul namespace "broken" (and
	// renders nothing for one in "blank"), while the sample New renders
	// is fine.
	const tmpl = `{{if eq .Namespace "broken"}}{{slice .Name 0 99}}{{else if eq .Namespace "blank"}}_{{else}}{{.Name}}.service.consul{{end}}`
	inNamespace := func(ns string) func(*api.ServiceEntry) {
		return func(e *api.ServiceEntry) { e.Service.Namespace = ns }
	}
	tests := []struct {
		name    string
		cfg     Config
		svc     string
		entry   *api.ServiceEntry
		want    rejectReason
		message string // a part of the message an operator reads
	}{
		{name: "entry without a service", svc: "web", entry: &api.ServiceEntry{Node: &api.Node{Node: "n1", Address: "10.0.0.1"}},
			want: reasonOther, message: "entry without service or node"},
		{name: "instance without an ID", svc: "web", entry: entry("n1", "10.0.0.1", "", 80),
			want: reasonOther, message: "instance has no ID"},
		{name: "no address", svc: "web", entry: entry("n1", "", "a", 80),
			want: reasonAddress, message: "no address"},
		{name: "address neither an IP nor a host name", svc: "web", entry: entry("n1", "10.0.0.1", "a", 80, withAddr("not an address!")),
			want: reasonAddress, message: "neither an IP address nor a host name"},
		{name: "address too long", svc: "web", entry: entry("n1", "10.0.0.1", "a", 80, withAddr(strings.Repeat("a.", 127)+"a")),
			want: reasonAddress, message: "(too long)"},
		{name: "port 0", svc: "web", entry: entry("n1", "10.0.0.1", "a", 0),
			want: reasonPort, message: "port 0"},
		{name: "port above 65535", svc: "web", entry: entry("n1", "10.0.0.1", "a", 70000),
			want: reasonPort, message: "port 70000"},
		{name: "service name with nothing left after sanitising", svc: "___", entry: entry("n1", "10.0.0.1", "a", 80),
			want: reasonName, message: "nothing left after sanitising"},
		{name: "host template rendering no host name", cfg: Config{HostTemplate: tmpl}, svc: "web", entry: entry("n1", "10.0.0.1", "a", 80, inNamespace("blank")),
			want: reasonName, message: "which is not a host name"},
		{name: "host template failing", cfg: Config{HostTemplate: tmpl}, svc: "web", entry: entry("n1", "10.0.0.1", "a", 80, inNamespace("broken")),
			want: reasonOther, message: "--consul-host-template: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rej, _ := mapOne(t, tt.cfg, "dc1", tt.svc, tt.entry)
			if len(rej) != 1 {
				t.Fatalf("rejected %v, want one record", rej)
			}
			err := rej[0].err
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("message %q, want it to say %q", err, tt.message)
			}
			if got := reasonOf(err); got != tt.want {
				t.Errorf("reason %q, want %q (%v)", got, tt.want, err)
			}
			if legacy := labelFromText(err); legacy != tt.want {
				t.Errorf("reason %q, but the message's words gave %q before (%v): a dashboard would see another series", tt.want, legacy, err)
			}
		})
	}

	t.Run("name taken by another consul service", func(t *testing.T) {
		err := errNameTaken(model.ServiceKey{Namespace: "consul", Name: "web"}, "web")
		if got := reasonOf(err); got != reasonName {
			t.Errorf("reason %q, want name", got)
		}
	})
	t.Run("an error without a reason", func(t *testing.T) {
		if got := reasonOf(errors.New("port address name")); got != reasonOther {
			t.Errorf("reason %q, want other: only the mapping says why", got)
		}
	})
}

// reasonOf returns the reason a rejection's error carries, other if none:
// the reason the core counts it under
// (galleon_registry_records_rejected_total{reason}).
func reasonOf(err error) rejectReason {
	return rejectReason(registry.ReasonOf(err, string(reasonOther)))
}

// TestRejectionsAreCountedByReason tells a Sink rejections through the
// Reconciler: each is passed on with its error, and carries the reason the
// core counts it under.
func TestRejectionsAreCountedByReason(t *testing.T) {
	rec := registrytest.NewRecorder()
	var sink registry.Sink = rec
	portErr := malformedf(reasonPort, "port %d: want 1 to 65535", 0)
	sink.Rejected("a", portErr)
	sink.Rejected("b", malformedf(reasonPort, "port %d: want 1 to 65535", 70000))
	sink.Rejected("c", errNameTaken(model.ServiceKey{Namespace: "consul", Name: "web"}, "web"))
	sink.Rejected("d", errors.New("no reason given"))

	events := rec.Events()
	if len(events) != 4 || events[0].Record != "a" || events[0].Err != portErr {
		t.Fatalf("the Sink was told %v", events)
	}
	got := map[string]float64{}
	for _, e := range events {
		got[registry.ReasonOf(e.Err, string(reasonOther))]++
	}
	want := map[string]float64{"port": 2, "name": 1, "other": 1}
	if len(got) != len(want) || got["port"] != 2 || got["name"] != 1 || got["other"] != 1 {
		t.Errorf("rejections by reason: %v, want %v", got, want)
	}
}
