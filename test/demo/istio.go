package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/test/istiod"
)

// entry is one ServiceEntry istiod holds, as the demo shows it.
type entry struct {
	Name      string // namespace/name
	Hosts     []string
	Ports     []string // "9080/HTTP", in istiod's order
	PortNames []string
	Addresses []string // of the endpoints, in istiod's order
}

func (e entry) hosts() string     { return list(e.Hosts) }
func (e entry) ports() string     { return list(e.Ports) }
func (e entry) addresses() string { return list(e.Addresses) }

// list is the items joined by commas, "-" for none.
func list(items []string) string {
	if len(items) == 0 {
		return "-"
	}
	return strings.Join(items, ",")
}

// entries are the ServiceEntries istiod holds (its /debug/configz), sorted by name.
func (d *demo) entries(ctx context.Context) ([]entry, error) {
	configs, err := d.ist.ConfigsOfKind(ctx, "ServiceEntry")
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(configs))
	for name, c := range configs {
		var spec struct {
			Hosts []string `json:"hosts"`
			Ports []struct {
				Number   uint32 `json:"number"`
				Protocol string `json:"protocol"`
				Name     string `json:"name"`
			} `json:"ports"`
			Endpoints []struct {
				Address string `json:"address"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal(c.Spec, &spec); err != nil {
			return nil, fmt.Errorf("istiod's ServiceEntry %s: %w", name, err)
		}
		e := entry{Name: name, Hosts: spec.Hosts}
		for _, p := range spec.Ports {
			e.Ports = append(e.Ports, strconv.Itoa(int(p.Number))+"/"+p.Protocol)
			e.PortNames = append(e.PortNames, p.Name)
		}
		for _, ep := range spec.Endpoints {
			e.Addresses = append(e.Addresses, ep.Address)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// entry is the ServiceEntry name, and whether istiod holds it.
func (d *demo) entry(ctx context.Context, name string) (entry, bool, error) {
	es, err := d.entries(ctx)
	if err != nil {
		return entry{}, false, err
	}
	for _, e := range es {
		if e.Name == name {
			return e, true, nil
		}
	}
	return entry{}, false, nil
}

// showEntries prints what istiod holds as a table.
func (d *demo) showEntries(ctx context.Context) ([]entry, error) {
	es, err := d.entries(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading istiod's /debug/configz: %w", err)
	}
	rows := make([][]string, 0, len(es))
	for _, e := range es {
		rows = append(rows, []string{e.Name, e.hosts(), e.ports(), strconv.Itoa(len(e.Addresses))})
	}
	d.table([]string{"NAMESPACE/NAME", "HOSTS", "PORTS", ">ENDPOINTS"}, rows)
	return es, nil
}

// waitEntry waits until istiod's ServiceEntry name satisfies cond (held says whether istiod
// holds it at all), and returns it.
func (d *demo) waitEntry(ctx context.Context, what, name string, cond func(e entry, held bool) bool) (entry, error) {
	var got entry
	err := d.waitUntil(ctx, 30*time.Second, what, func(ctx context.Context) (bool, error) {
		e, held, err := d.entry(ctx, name)
		got = e
		return err == nil && cond(e, held), err
	})
	return got, err
}

// startIstiod (re)starts istiod on the sources and waits until it has synced with them (its
// plain gRPC port opens once every config source has synced).
func (d *demo) startIstiod(ctx context.Context, dirName string, sources ...*daemon) error {
	if d.ist != nil {
		d.crew.remove(d.istMember)
		d.ist.Close()
		d.ist = nil
	}
	addrs := make([]string, len(sources))
	names := make([]string, len(sources))
	for i, s := range sources {
		addrs[i], names[i] = s.XDS, s.name
	}
	ist, err := istiod.StartServer(ctx, istiod.Options{
		ConfigSources: addrs, Release: d.pilot, Dir: filepath.Join(d.dir, dirName), Detach: d.detach(),
	})
	if err != nil {
		return fmt.Errorf("istiod did not sync with %s: %w", strings.Join(names, ", "), err)
	}
	d.ist = ist
	d.istMember = &member{
		name: "istiod", pid: ist.Pid, exited: func() bool { ok, _ := ist.Exited(); return ok },
		stop: ist.Stop, logs: []namedLog{{"istiod", ist.LogPath}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  http://%s/debug/configz   http://%s/metrics   log %s", ist.Pid(), ist.MonitoringAddr, ist.MonitoringAddr, ist.LogPath)
		},
	}
	d.crew.add(d.istMember)
	d.say("    mesh config: %s", meshSummary(ist.MeshConfigPath))
	d.ok("istiod (pid %d) synced: xDS for proxies on %s, debug on http://%s", ist.Pid(), ist.GRPCAddr, ist.MonitoringAddr)
	return nil
}

// meshSummary is the mesh config file on one line, its comment left out.
func meshSummary(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}

// waitHolds waits until istiod holds exactly the ServiceEntries served (the names every source
// serves) and has pushed once (the initial sync ends with istiod's first push: every story
// starts from a settled istiod).
func (d *demo) waitHolds(ctx context.Context, what string, served []string) error {
	slices.Sort(served)
	err := d.waitUntil(ctx, 30*time.Second, "istiod's /debug/configz lists every service "+what+" serves", func(ctx context.Context) (bool, error) {
		es, err := d.entries(ctx)
		if err != nil {
			return false, err
		}
		names := make([]string, len(es))
		for i, e := range es {
			names[i] = e.Name
		}
		if !slices.Equal(names, served) {
			return false, fmt.Errorf("istiod holds %v, want %v", names, served)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	err = d.waitUntil(ctx, 30*time.Second, "istiod's first push", func(ctx context.Context) (bool, error) {
		c, err := d.ist.PushCounters(ctx)
		return err == nil && c.Debounces >= 1, err
	})
	if err != nil {
		return err
	}
	d.ok("istiod holds all %d ServiceEntries (%s since the start)", len(served), since(d.start))
	return nil
}

// servedBy is every name the daemons serve.
func (d *demo) servedBy(ctx context.Context, daemons ...*daemon) ([]string, error) {
	var all []string
	for _, g := range daemons {
		names, err := d.names(ctx, g)
		if err != nil {
			return nil, err
		}
		all = append(all, names...)
	}
	return all, nil
}

// counters reads istiod's push counters.
func (d *demo) counters(ctx context.Context) (istiod.PushCounters, error) {
	c, err := d.ist.PushCounters(ctx)
	if err != nil {
		return c, fmt.Errorf("cannot read istiod's metrics (http://%s/metrics): %w", d.ist.MonitoringAddr, err)
	}
	return c, nil
}

// pushed waits until istiod has dispatched a push since before, and returns the counters then.
func (d *demo) pushed(ctx context.Context, before istiod.PushCounters) (istiod.PushCounters, error) {
	var now istiod.PushCounters
	err := d.waitUntil(ctx, 20*time.Second, "istiod pushes the change", func(ctx context.Context) (bool, error) {
		var err error
		now, err = d.ist.PushCounters(ctx)
		return err == nil && now.Debounces > before.Debounces, err
	})
	return now, err
}

// edsOnly says and checks that a change was an endpoint-only update: no full push, an EDS one.
func (d *demo) edsOnly(before, after istiod.PushCounters, change, how string) error {
	d.ok("full pushes %.0f -> %.0f, EDS updates %.0f -> %.0f: %s", before.FullPushes, after.FullPushes, before.EDSUpdates, after.EDSUpdates, how)
	if after.FullPushes != before.FullPushes {
		return fmt.Errorf("%s caused %.0f full push(es); want none", change, after.FullPushes-before.FullPushes)
	}
	if after.EDSUpdates <= before.EDSUpdates {
		return errors.New(change + " caused no EDS update")
	}
	return nil
}

// fullPush checks that a change made istiod do a full push.
func fullPush(before, after istiod.PushCounters, change string) error {
	if after.FullPushes <= before.FullPushes {
		return errors.New(change + " caused no full push")
	}
	return nil
}

// showCounters prints istiod's push counters so far.
func (d *demo) showCounters(ctx context.Context, what string) (istiod.PushCounters, error) {
	c, err := d.counters(ctx)
	if err != nil {
		return c, err
	}
	d.say("istiod %s: %.0f full push(es) (pilot_pushcontext_init_seconds_count), %.0f EDS update(s)", what, c.FullPushes, c.EDSUpdates)
	return c, nil
}
