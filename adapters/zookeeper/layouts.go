package zookeeper

import (
	"slices"
	"strings"
)

// Several layouts in one process (issue 31). --zk-layout lists the layouts served
// (curator,dubbo,dubbo3; "all" is the three), --zk-root gives each its root: one path for
// every layout listed, or layout=path entries (a layout not named takes its default root). The
// layouts whose roots are equal are one tree, read with one set of watches: Curator and Dubbo 3
// may share a root (both default to /services), and their nodes are told apart one by one
// (shared); Dubbo 2 needs a root of its own. Roots may not lie inside one another.

// layoutKind is a layout, as an index: what an instance node was read as, which decides its
// service's host template and its rank when two services of one name collide (claims.go).
type layoutKind uint8

const (
	kindCurator layoutKind = iota
	kindDubbo
	kindDubbo3
	nKinds
)

// LayoutAll is the --zk-layout value that lists every layout, in this order.
const LayoutAll = "all"

var kindNames = [nKinds]string{LayoutCurator, LayoutDubbo, LayoutDubbo3}

func (k layoutKind) String() string { return kindNames[k] }

// kindOf is the layout named s.
func kindOf(s string) (layoutKind, bool) {
	i := slices.Index(kindNames[:], s)
	return layoutKind(i), i >= 0
}

// defaultRoot is the root of layout k when --zk-root does not name one.
func defaultRoot(k layoutKind) string {
	if k == kindDubbo {
		return DefaultDubboRoot
	}
	return DefaultRoot
}

// defaultHostTemplate is the host template of layout k when --zk-host-template is not set.
func defaultHostTemplate(k layoutKind) string {
	if k == kindCurator {
		return DefaultHostTemplate
	}
	return DefaultDubboHostTemplate
}

// treeConf is one root and the layouts read under it, in --zk-layout order.
type treeConf struct {
	root  string
	kinds []layoutKind
}

// parseLayouts reads --zk-layout: the layouts in the order given (their rank), the default
// curator when empty.
func parseLayouts(s string, add func(format string, args ...any)) []layoutKind {
	if strings.TrimSpace(s) == "" {
		return []layoutKind{kindCurator}
	}
	var kinds []layoutKind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == LayoutAll {
			for k := range nKinds {
				if !slices.Contains(kinds, k) {
					kinds = append(kinds, k)
				}
			}
			continue
		}
		k, ok := kindOf(f)
		switch {
		case !ok:
			add("--%s %q: want %s, %s, %s, a list of them (e.g. %s,%s) or %s", flagLayout, f, LayoutCurator, LayoutDubbo, LayoutDubbo3, LayoutCurator, LayoutDubbo3, LayoutAll)
		case slices.Contains(kinds, k):
			add("--%s %q: %s is listed twice", flagLayout, s, f)
		default:
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		kinds = []layoutKind{kindCurator} // an error was added: check the rest as the default
	}
	return kinds
}

// parseRoots reads --zk-root for the layouts kinds: "" (every layout its default root), one
// path (every layout's), or layout=path entries separated by commas.
func parseRoots(s string, kinds []layoutKind, add func(format string, args ...any)) map[layoutKind]string {
	roots := map[layoutKind]string{}
	s = strings.TrimSpace(s)
	switch {
	case s == "":
	case !strings.Contains(s, "="):
		for _, k := range kinds {
			roots[k] = s
		}
	default:
		for _, f := range strings.Split(s, ",") {
			name, root, ok := strings.Cut(strings.TrimSpace(f), "=")
			k, known := kindOf(strings.TrimSpace(name))
			switch {
			case !ok || !known:
				add("--%s %q: want one path for every layout (e.g. /services) or layout=path entries (e.g. %s=/services,%s=/dubbo)", flagRoot, f, LayoutCurator, LayoutDubbo)
				continue
			case !slices.Contains(kinds, k):
				add("--%s %q: --%s does not list %s; add it there or remove this entry", flagRoot, f, flagLayout, name)
				continue
			case roots[k] != "":
				add("--%s %q: %s is given two roots", flagRoot, s, name)
				continue
			}
			roots[k] = strings.TrimSpace(root)
		}
	}
	for _, k := range kinds {
		if roots[k] == "" {
			roots[k] = defaultRoot(k)
		}
	}
	return roots
}

// buildTrees groups the layouts by root and checks that the trees can be read together.
func buildTrees(kinds []layoutKind, roots map[layoutKind]string, add func(format string, args ...any)) []treeConf {
	var trees []treeConf
	for _, k := range kinds {
		root := roots[k]
		if err := checkRoot(root); err != nil {
			add("--%s %q (layout %s): %v", flagRoot, root, k, err)
			continue
		}
		i := slices.IndexFunc(trees, func(t treeConf) bool { return t.root == root })
		if i < 0 {
			trees = append(trees, treeConf{root: root, kinds: []layoutKind{k}})
			continue
		}
		if k == kindDubbo || slices.Contains(trees[i].kinds, kindDubbo) {
			add("--%s: layouts %s and %s share root %s: a Dubbo 2 registry needs a root of its own (give one with --%s %s=<path>)", flagRoot, trees[i].kinds[0], k, root, flagRoot, LayoutDubbo)
			continue
		}
		trees[i].kinds = append(trees[i].kinds, k)
	}
	for i, a := range trees {
		for _, b := range trees[i+1:] {
			if strings.HasPrefix(a.root+"/", b.root+"/") || strings.HasPrefix(b.root+"/", a.root+"/") {
				add("--%s: root %s (%s) and root %s (%s) lie inside one another: give the layouts roots apart, e.g. /services and /dubbo", flagRoot, a.root, kindsString(a.kinds), b.root, kindsString(b.kinds))
			}
		}
	}
	return trees
}

func kindsString(kinds []layoutKind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = k.String()
	}
	return strings.Join(s, "+")
}

// tree is one root watched, with the layout its nodes are read by.
type tree struct {
	root   string
	layout layout
	kinds  []layoutKind
}

// ins is the znode whose children are the instances of service znode name.
func (t *tree) ins(name string) string { return t.layout.instancesPath(t.root, name) }

// ovr is the znode whose children are the overrides of service znode name ("" when none).
func (t *tree) ovr(name string) string { return t.layout.overridesPath(t.root, name) }

// newTree makes the tree of tc, its layout with the protocol overrides.
func newTree(tc treeConf, overrides map[string]string) *tree {
	t := &tree{root: tc.root, kinds: tc.kinds}
	switch {
	case len(tc.kinds) > 1: // curator and dubbo3 (buildTrees)
		t.layout = shared{d3: newDubbo3(overrides)}
	case tc.kinds[0] == kindDubbo:
		t.layout = newDubbo(overrides)
	case tc.kinds[0] == kindDubbo3:
		t.layout = newDubbo3(overrides)
	default:
		t.layout = curator{}
	}
	return t
}

// shared is a root that Curator (Spring Cloud Zookeeper) and Dubbo 3 share, /services by
// default for both. Each instance node is told apart by what it holds: a Curator ServiceInstance
// whose payload is Dubbo's (payload "@class" org.apache.dubbo.registry.zookeeper.ZookeeperInstance,
// or metadata "dubbo.endpoints" or "dubbo.metadata.revision": dubbo3Sign) is a Dubbo 3
// application instance and is read by the Dubbo 3 layout's rules; any other is Curator's and is
// read by its rules. A node that is neither (not JSON, no address, ...) is rejected as in the
// Curator layout. The root's children are services as in Dubbo 3 (mapping, config and metadata
// are Dubbo's), and the Dubbo 2 categories Dubbo 3 writes beside its applications are no
// instances.
type shared struct {
	curator
	d3 dubbo3
}

func (s shared) isService(name string) bool { return s.d3.isService(name) }

func (s shared) parseInstance(name, id string, data []byte) (endpoint, error) {
	if dubboCategories[id] {
		return endpoint{}, errNotInstance
	}
	var ci curatorInstance
	e, err := curatorEndpoint(id, data, &ci, readAuto)
	if err != nil || e.kind != kindDubbo3 {
		return e, err
	}
	return s.d3.finish(name, e, &ci)
}

var _ layout = shared{}
