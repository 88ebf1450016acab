package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
)

// The fleet act's collision: Consul gets a reviews instance, and galleon-fleet renders Consul's
// services under .bookinfo.internal, the hosts galleon-file gives the Bookinfo services, so
// reviews.bookinfo.internal is in both registries.
const (
	fleetReviewsHost = "reviews.bookinfo.internal"
	fleetReviewsIP   = "10.20.5.1"
)

// fleetList is galleon-fleet's registry list: the demo's file directory and Consul agent (and
// its ZooKeeper with zookeeper), and rule for reviews.bookinfo.internal.
func (d *demo) fleetList(rule string, zookeeper bool) string {
	var b strings.Builder
	b.WriteString("registries:\n")
	fmt.Fprintf(&b, "- name: file\n  kind: file\n  settings: {file-dir: %q}\n", d.fileDir)
	fmt.Fprintf(&b, "- name: consul\n  kind: consul\n  settings: {consul-address: %q, consul-host-template: \"{{.Name}}.bookinfo.internal\"}\n", d.consul.HTTPAddr)
	if zookeeper {
		fmt.Fprintf(&b, "- name: dubbo\n  kind: zookeeper\n  settings: {zk-servers: %q, zk-layout: dubbo}\n", d.zkAddr)
	}
	fmt.Fprintf(&b, "hosts:\n- host: %s\n  %s\n", fleetReviewsHost, rule)
	return b.String()
}

// fleetAct runs galleon-fleet on the file directory and the Consul agent, restarts istiod on it
// alone, and edits the registry list live: the shared host merged, then one registry preferred,
// then ZooKeeper added.
func (d *demo) fleetAct(ctx context.Context) error {
	d.heading("21. galleon-fleet: several registries from one registry list, one ServiceEntry per host")
	t0 := time.Now()
	if err := d.buildGalleon(ctx, "galleon-fleet"); err != nil {
		return err
	}
	d.ok("built in %s", since(t0))
	in := consulInstance("vm-5", fleetReviewsIP, "reviews-1", "reviews", 9080, "http")
	d.command("consul: register %s", describeInstance(in))
	if err := consultest.Register(ctx, d.consul, []consultest.Instance{in}); err != nil {
		return err
	}
	list := filepath.Join(d.dir, "registries.yaml")
	if err := writeAtomic(list, []byte(d.fleetList("merge: true", false))); err != nil {
		return err
	}
	d.command("cat %s", list)
	d.indent(d.fleetList("merge: true", false))
	d.note("    Each entry is an adapter (kind) with its own flags as settings; Consul's services are")
	d.note("    rendered under .bookinfo.internal, so reviews.bookinfo.internal is in both registries.")
	args := []string{"--registries", list, "--registries-check-interval", "300ms", "--debounce-quiet", "20ms"}
	d.command("galleon-fleet %s", strings.Join(args, " "))
	g, err := d.startDaemon(ctx, "galleon-fleet", args...)
	if err != nil {
		return err
	}
	d.ok("galleon-fleet (pid %d) serves MCP on %s, ready %s after its start", g.srv.Pid(), g.XDS, since(t0))
	d.hints = append(d.hints, fmt.Sprintf("Edit galleon-fleet's registry list:   %s", list))

	d.heading("22. Restart istiod with one configSource: galleon-fleet")
	if err := d.restartOn(ctx, "istiod-fleet", g); err != nil {
		return err
	}
	if _, err := d.showEntries(ctx); err != nil {
		return err
	}
	reviews, err := d.waitEntry(ctx, "istiod's bookinfo/reviews has file's and Consul's endpoints", "bookinfo/reviews",
		func(e entry, held bool) bool {
			return held && slices.Contains(e.Addresses, fleetReviewsIP) && len(e.Addresses) > 1
		})
	if err != nil {
		return err
	}
	d.ok("bookinfo/reviews: %s, endpoints %s (galleon-file's and Consul's: merge)", reviews.hosts(), reviews.addresses())
	if err := d.fleetCollision(ctx, g, "merged", "file,consul"); err != nil {
		return err
	}
	return d.fleetEdits(ctx, g, list)
}

// fleetEdits edits the registry list live: Consul preferred for the shared host, then ZooKeeper
// added.
func (d *demo) fleetEdits(ctx context.Context, g *daemon, list string) error {
	d.heading("23. Edit the list live: prefer Consul for reviews.bookinfo.internal")
	c, err := d.counters(ctx)
	if err != nil {
		return err
	}
	d.command("edit %s: hosts: [{host: %s, prefer: [consul]}]", list, fleetReviewsHost)
	if err := writeAtomic(list, []byte(d.fleetList("prefer: [consul]", false))); err != nil {
		return err
	}
	reviews, err := d.waitEntry(ctx, "istiod's bookinfo/reviews has Consul's endpoint alone", "bookinfo/reviews",
		func(e entry, held bool) bool { return held && e.addresses() == fleetReviewsIP })
	if err != nil {
		return err
	}
	after, err := d.pushed(ctx, c)
	if err != nil {
		return err
	}
	d.ok("bookinfo/reviews: endpoints %s; full pushes %.0f -> %.0f, EDS updates %.0f -> %.0f", reviews.addresses(),
		c.FullPushes, after.FullPushes, c.EDSUpdates, after.EDSUpdates)
	if err := d.fleetCollision(ctx, g, "preferred", "consul"); err != nil {
		return err
	}

	d.heading("24. Add the ZooKeeper registry to the list, live")
	before, err := d.entries(ctx)
	if err != nil {
		return err
	}
	d.command("edit %s: registries += {name: dubbo, kind: zookeeper, settings: {zk-servers: %s, zk-layout: dubbo}}", list, d.zkAddr)
	if err := writeAtomic(list, []byte(d.fleetList("prefer: [consul]", true))); err != nil {
		return err
	}
	var dubbo string
	err = d.waitUntil(ctx, 20*time.Second, "istiod holds the Dubbo service", func(ctx context.Context) (bool, error) {
		es, err := d.entries(ctx)
		for _, e := range es {
			if strings.HasPrefix(e.Name, "default/org-apache-demo-greetingservice-1-0-0--") {
				dubbo = e.Name
			}
		}
		return err == nil && dubbo != "" && len(es) == len(before)+1, err
	})
	if err != nil {
		return err
	}
	d.ok("istiod holds %s too, beside the %d ServiceEntries of the file directory and Consul", dubbo, len(before))
	return d.fleetOwnView(ctx, g)
}

// fleetCollision checks that galleon-fleet's /debug/status reports reviews.bookinfo.internal's
// collision with outcome, serving registries served.
func (d *demo) fleetCollision(ctx context.Context, g *daemon, outcome, served string) error {
	body, err := g.get(ctx, "/debug/status")
	if err != nil {
		return err
	}
	var st struct {
		Collisions []struct {
			Host     string   `json:"host"`
			Services []string `json:"services"`
			Outcome  string   `json:"outcome"`
			Served   []string `json:"served"`
		} `json:"collisions"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("galleon-fleet's /debug/status: %w", err)
	}
	for _, c := range st.Collisions {
		if c.Host == fleetReviewsHost && c.Outcome == outcome && strings.Join(c.Served, ",") == served {
			d.ok("galleon-fleet's /debug/status: %s collision of %s: %s, served from %s", c.Host, strings.Join(c.Services, " and "), c.Outcome, served)
			return nil
		}
	}
	return fmt.Errorf("galleon-fleet's /debug/status does not report %s %s from %s: %s", fleetReviewsHost, outcome, served, body)
}

// fleetOwnView shows galleon-fleet's registries and its fleet metrics.
func (d *demo) fleetOwnView(ctx context.Context, g *daemon) error {
	d.heading("25. galleon-fleet's own view")
	body, err := g.get(ctx, "/debug/status")
	if err != nil {
		return err
	}
	var st struct {
		Registries []struct {
			Name     string `json:"name"`
			Kind     string `json:"kind"`
			Synced   bool   `json:"synced"`
			Services int    `json:"services"`
		} `json:"registries"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("galleon-fleet's /debug/status: %w", err)
	}
	d.command("GET http://%s/debug/status  (its registries)", g.HTTP)
	var rows []string
	for _, r := range st.Registries {
		rows = append(rows, fmt.Sprintf("%-8s %-10s synced=%v services=%d", r.Name, r.Kind, r.Synced, r.Services))
		if !r.Synced {
			return fmt.Errorf("galleon-fleet's registry %s is not synced: %s", r.Name, body)
		}
	}
	d.indent(strings.Join(rows, "\n"))
	if len(st.Registries) != 3 {
		return fmt.Errorf("galleon-fleet runs %d registries, want file, consul and dubbo: %s", len(st.Registries), body)
	}
	if _, err := d.showMetrics(ctx, g, `^galleon_(fleet_|services\{)`); err != nil {
		return err
	}
	d.note("    One process, one istiod configSource, one ServiceEntry per host; every series of a")
	d.note("    registry carries its name (registry=\"file\", ...); registry=\"fleet\" is what is served.")
	return nil
}
