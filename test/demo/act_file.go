package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// fileAct builds the binaries, starts galleon-file on a copy of examples/file and istiod on it,
// and edits the files: an instance moves, a port is added, a service is removed.
func (d *demo) fileAct(ctx context.Context) error {
	d.heading("1. Build galleon-file, galleon-consul, galleon-zookeeper, galleon-eureka and galleonctl")
	t0 := time.Now()
	if err := d.buildGalleon(ctx, "galleon-file", "galleon-consul", "galleon-zookeeper", "galleon-eureka", "galleonctl"); err != nil {
		return err
	}
	d.ok("built into %s in %s", d.binDir, since(t0))

	d.heading("2. istiod (pilot-discovery " + istiod.Version + ")")
	recipe, err := toolcache.IstiodRecipe(istiod.Version)
	if err != nil {
		return err
	}
	pilot, err := recipe.Build(ctx, d.progress())
	if err != nil {
		return err
	}
	d.pilot = istiod.Release{Name: istiod.Version, Binary: pilot}
	d.ok("%s", pilot)

	d.heading("3. Start galleon-file on a copy of examples/file")
	regDir := filepath.Join(d.dir, "registry")
	files, err := copyExamples(regDir)
	if err != nil {
		return err
	}
	d.say("    registry: %s (%s)", regDir, strings.Join(files, " "))
	d.fileDir = regDir
	g, err := d.startDaemon(ctx, "galleon-file", "--file-dir", regDir)
	if err != nil {
		return err
	}
	d.ok("galleon-file (pid %d) serves MCP on %s, http://%s/readyz says ready", g.srv.Pid(), g.XDS, g.HTTP)
	d.hints = append(d.hints,
		fmt.Sprintf("Edit, add or delete *.yaml files in:  %s", regDir),
		fmt.Sprintf("Follow what galleon-file serves:      %s watch --addr %s --delta", d.galleonctlPath(), g.XDS),
		fmt.Sprintf("Get it once:                          %s get --addr %s -o yaml", d.galleonctlPath(), g.XDS))

	d.heading("4. Start istiod reading configSources: xds://" + g.XDS)
	if err := d.startIstiod(ctx, "istiod", g); err != nil {
		return err
	}
	served, err := d.servedBy(ctx, g)
	if err != nil {
		return err
	}
	if err := d.waitHolds(ctx, "galleon-file", served); err != nil {
		return err
	}
	if err := d.showFile(ctx, g, served); err != nil {
		return err
	}
	return d.fileChanges(ctx, filepath.Join(regDir, "bookinfo.yaml"), len(served))
}

// copyExamples copies examples/file/*.yaml into dir and returns their names.
func copyExamples(dir string) ([]string, error) {
	root, err := toolcache.RepoRoot()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(root, "examples", "file", "*.yaml"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no examples/file/*.yaml in %s (%v)", root, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), data, 0o644); err != nil {
			return nil, err
		}
		names = append(names, filepath.Base(p))
	}
	return names, nil
}

// showFile shows what galleon-file serves and what istiod holds.
func (d *demo) showFile(ctx context.Context, g *daemon, served []string) error {
	d.heading("A. What Galleon serves (galleonctl speaks MCP-over-xDS like istiod)")
	d.command("galleonctl get --addr %s -o names", g.XDS)
	d.indent(strings.Join(served, "\n"))
	d.say("")
	if err := d.showYAML(ctx, g, "", "first of the list"); err != nil {
		return err
	}
	d.heading("B. What istiod holds (its /debug/configz)")
	if _, err := d.showEntries(ctx); err != nil {
		return err
	}
	d.note("    Each one's resourceVersion in istiod is Galleon's content hash: istiod re-processes a")
	d.note("    ServiceEntry only when that hash moves.")
	return nil
}

// showYAML shows one item (name, or the first) of what the daemon serves, as galleonctl's YAML.
func (d *demo) showYAML(ctx context.Context, g *daemon, name, comment string) error {
	d.command("galleonctl get --addr %s -o yaml    %s", g.XDS, d.dimmed("# "+comment))
	out, err := d.galleonctl(ctx, "get", "--addr", g.XDS, "-o", "yaml")
	if err != nil {
		return err
	}
	item := yamlItem(out, name)
	if item == "" {
		return fmt.Errorf("galleonctl get -o yaml listed no item %q", name)
	}
	d.indent(item)
	return nil
}

// yamlItem is the item name (default: the first) of galleonctl's -o yaml List, as a document of
// its own.
func yamlItem(list, name string) string {
	var items []string
	var cur []string
	in := false
	for _, line := range strings.Split(list, "\n") {
		switch {
		case line == "items:":
			in = true
		case !in:
		case strings.HasPrefix(line, "- "):
			if cur != nil {
				items = append(items, strings.Join(cur, "\n"))
			}
			cur = []string{strings.TrimPrefix(line, "- ")}
		case strings.HasPrefix(line, "  "):
			cur = append(cur, strings.TrimPrefix(line, "  "))
		default:
			in = false
		}
	}
	if cur != nil {
		items = append(items, strings.Join(cur, "\n"))
	}
	for _, it := range items {
		if name == "" || strings.Contains("\n"+it+"\n", "\n  name: "+name+"\n") {
			return it
		}
	}
	return ""
}

// fileChanges edits bookinfo.yaml three times and checks what istiod does with each edit.
func (d *demo) fileChanges(ctx context.Context, bookinfo string, served int) error {
	c0, err := d.showCounters(ctx, "so far")
	if err != nil {
		return err
	}
	c1, err := d.fileMove(ctx, bookinfo, c0)
	if err != nil {
		return err
	}
	c2, err := d.filePort(ctx, bookinfo, c1)
	if err != nil {
		return err
	}
	return d.fileRemove(ctx, bookinfo, c2, served)
}

func (d *demo) fileMove(ctx context.Context, bookinfo string, before istiod.PushCounters) (istiod.PushCounters, error) {
	d.heading("C. An instance moves: bookinfo/details 10.10.1.11 -> 10.10.1.12")
	e, _, err := d.entry(ctx, "bookinfo/details")
	if err != nil {
		return before, err
	}
	d.say("    before: endpoints %s", e.addresses())
	d.command("edit %s: address: 10.10.1.11 -> address: 10.10.1.12", bookinfo)
	if err := editFile(bookinfo, "address: 10.10.1.11\n", "address: 10.10.1.12\n"); err != nil {
		return before, err
	}
	t0 := time.Now()
	e, err = d.waitEntry(ctx, "istiod holds bookinfo/details with endpoint 10.10.1.12", "bookinfo/details",
		func(e entry, _ bool) bool { return e.addresses() == "10.10.1.12" })
	if err != nil {
		return before, err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return before, err
	}
	d.ok("istiod has it %s after the save: endpoints %s", since(t0), e.addresses())
	if err := d.edsOnly(before, after, "an endpoint-only change", "an endpoint-only (EDS) update, no full push"); err != nil {
		return after, err
	}
	d.note("    Galleon keeps everything but the endpoints byte-identical and create_time fixed, so istiod")
	d.note("    updates the endpoints without recomputing the whole mesh config.")
	return after, nil
}

func (d *demo) filePort(ctx context.Context, bookinfo string, before istiod.PushCounters) (istiod.PushCounters, error) {
	d.heading("D. A port is added: bookinfo/ratings gets 9443/HTTPS")
	e, _, err := d.entry(ctx, "bookinfo/ratings")
	if err != nil {
		return before, err
	}
	d.say("    before: ports %s", e.ports())
	d.command("edit %s: ratings ports += {number: 9443, protocol: HTTPS, name: https}", bookinfo)
	const ratings = "- name: ratings\n  namespace: bookinfo\n  ports:\n  - {number: 9080, protocol: HTTP, name: http}\n"
	if err := editFile(bookinfo, ratings, ratings+"  - {number: 9443, protocol: HTTPS, name: https}\n"); err != nil {
		return before, err
	}
	t0 := time.Now()
	e, err = d.waitEntry(ctx, "istiod holds bookinfo/ratings with ports 9080/HTTP,9443/HTTPS", "bookinfo/ratings",
		func(e entry, _ bool) bool { return e.ports() == "9080/HTTP,9443/HTTPS" })
	if err != nil {
		return before, err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return before, err
	}
	d.ok("istiod has it %s after the save: ports %s", since(t0), e.ports())
	d.ok("full pushes %.0f -> %.0f: a new port changes the service, so istiod does a full push (+%.0f)",
		before.FullPushes, after.FullPushes, after.FullPushes-before.FullPushes)
	return after, fullPush(before, after, "a port change")
}

func (d *demo) fileRemove(ctx context.Context, bookinfo string, before istiod.PushCounters, served int) error {
	d.heading("E. A service is removed: bookinfo/productpage leaves bookinfo.yaml")
	d.command("edit %s: delete the productpage entry", bookinfo)
	if err := cutFrom(bookinfo, "- name: productpage\n"); err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := d.waitEntry(ctx, "bookinfo/productpage gone from istiod", "bookinfo/productpage",
		func(_ entry, held bool) bool { return !held }); err != nil {
		return err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return err
	}
	d.ok("gone from istiod %s after the save; full pushes %.0f -> %.0f", since(t0), before.FullPushes, after.FullPushes)
	if err := fullPush(before, after, "removing a service"); err != nil {
		return err
	}
	d.say("")
	es, err := d.showEntries(ctx)
	if err != nil {
		return err
	}
	if len(es) != served-1 {
		return fmt.Errorf("istiod holds %d ServiceEntries, want the %d remaining services", len(es), served-1)
	}
	return nil
}

// editFile replaces the first old in file by new, atomically (a temporary file renamed over
// it, as an editor or config management writes), and fails if old is not there.
func editFile(file, old, new string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if !bytes.Contains(data, []byte(old)) {
		return fmt.Errorf("editing %s changed nothing: it has no %q (examples/file changed?)", filepath.Base(file), old)
	}
	return writeAtomic(file, bytes.Replace(data, []byte(old), []byte(new), 1))
}

// cutFrom removes everything from the first line that is line on, atomically.
func cutFrom(file, line string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	i := bytes.Index(data, []byte("\n"+line))
	if i < 0 {
		return fmt.Errorf("editing %s changed nothing: it has no line %q (examples/file changed?)", filepath.Base(file), strings.TrimSpace(line))
	}
	return writeAtomic(file, data[:i+1])
}

func writeAtomic(file string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
