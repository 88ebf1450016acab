package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/galleon-mesh/galleon/internal/importfilter"
)

// List is the registry list of a fleet: the registries it runs, in order,
// and the rules for hosts that more than one of them has. It is read from
// YAML (ParseList), e.g. a ConfigMap's key.
type List struct {
	Registries []Entry
	Rules      []HostRule
}

// Entry is one registry of the list.
type Entry struct {
	// Name names the registry in metrics (the registry label), logs,
	// /debug/status, host rules and config subsets. Unique in the list.
	Name string
	// Kind is the adapter: consul, eureka, file, nacos, zookeeper (or a
	// partner's, when the fleet binary has it).
	Kind string
	// Settings are the adapter's own flags by name, as the keys of the
	// adapter binary's --config file: their values are checked exactly as
	// that binary checks them.
	Settings map[string]any
	// Filters are the registry's import filters, under the names of the
	// binaries' flags (include-services, exclude-labels, ...): checked
	// by ParseList.
	Filters importfilter.Settings
}

// MaxRegistries bounds the registries of one list: each runs its own
// watch, and one process is not meant to hold hundreds.
const MaxRegistries = 64

// Names returns the registries' names in the list's order.
func (l List) Names() []string {
	names := make([]string, len(l.Registries))
	for i, e := range l.Registries {
		names[i] = e.Name
	}
	return names
}

// Entry returns the entry named name, nil when none.
func (l List) Entry(name string) *Entry {
	for i := range l.Registries {
		if l.Registries[i].Name == name {
			return &l.Registries[i]
		}
	}
	return nil
}

// Reserved is the registry name the fleet's merged output is metered
// under (galleon_services{registry="fleet"}): no registry may take it.
const Reserved = "fleet"

// registryName is what a registry name may be: a DNS label, so that it
// can be a label value, a suffix of a resource name and a word in a log
// line alike.
var registryName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// listFile is the YAML form of a List.
type listFile struct {
	Registries []entryFile `yaml:"registries"`
	Hosts      []ruleFile  `yaml:"hosts"`
}

type entryFile struct {
	Name     string                `yaml:"name"`
	Kind     string                `yaml:"kind"`
	Settings map[string]any        `yaml:"settings"`
	Filters  importfilter.Settings `yaml:"filters"`
}

type ruleFile struct {
	Host   string   `yaml:"host"`
	Merge  bool     `yaml:"merge"`
	Prefer []string `yaml:"prefer"`
	Reject bool     `yaml:"reject"`
}

// ParseList reads a registry list, checking everything it can without the
// adapters: the names, that each kind is one of kinds, and the host rules.
// An entry's settings are the adapter's to check (the fleet builds the
// adapter from them before it takes the list).
func ParseList(raw []byte, kinds []string) (List, error) {
	var f listFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return List{}, errors.New("the list is empty: want registries: [{name: ..., kind: ..., settings: {...}, filters: {...}}]")
		}
		return List{}, fmt.Errorf("not a registry list: %w", err)
	}
	var problems []string
	if len(f.Registries) == 0 {
		problems = append(problems, "registries: none listed; want at least one {name, kind, settings}")
	}
	if len(f.Registries) > MaxRegistries {
		problems = append(problems, fmt.Sprintf("registries: %d listed, at most %d", len(f.Registries), MaxRegistries))
	}
	var l List
	seen := map[string]bool{}
	for i, e := range f.Registries {
		where := fmt.Sprintf("registries[%d]", i)
		switch {
		case !registryName.MatchString(e.Name):
			problems = append(problems, fmt.Sprintf("%s: name %q: want lower-case letters, digits and '-', 1 to 40 of them (a DNS label)", where, e.Name))
		case e.Name == Reserved:
			problems = append(problems, fmt.Sprintf("%s: name %q is reserved for the fleet's merged output", where, e.Name))
		case seen[e.Name]:
			problems = append(problems, fmt.Sprintf("%s: name %q is listed twice", where, e.Name))
		}
		seen[e.Name] = true
		if !slices.Contains(kinds, e.Kind) {
			problems = append(problems, fmt.Sprintf("%s (%s): kind %q: want one of %s", where, e.Name, e.Kind, strings.Join(kinds, ", ")))
		}
		if _, err := importfilter.New(e.Filters, "filters: "); err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s): %v", where, e.Name, strings.ReplaceAll(err.Error(), "\n", "; ")))
		}
		l.Registries = append(l.Registries, Entry(e))
	}
	for i, r := range f.Hosts {
		actions := 0
		rule := HostRule{Host: r.Host}
		if r.Merge {
			actions++
			rule.Action = Merge
		}
		if r.Reject {
			actions++
			rule.Action = Reject
		}
		if r.Prefer != nil {
			actions++
			rule.Action, rule.Prefer = Prefer, r.Prefer
		}
		if actions != 1 {
			problems = append(problems, fmt.Sprintf("hosts[%d]: host %q: want exactly one of merge: true, prefer: [registries], reject: true", i, r.Host))
			continue
		}
		l.Rules = append(l.Rules, rule)
	}
	if len(problems) == 0 {
		if err := CheckRules(l.Rules, l.Names()); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return List{}, errors.New(strings.Join(problems, "\n"))
	}
	return l, nil
}
