package subset

import (
	"bytes"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Router hands each sink the source its subset is served from: a view of
// the store for the first subset whose sink selector picks it, the whole
// store for sinks no subset picks. It is a snapshot.Router.
type Router struct {
	store   *snapshot.Store
	subsets []Subset
	views   []*snapshot.View
}

// DefaultName is the subset name reported for sinks no rule selects.
const DefaultName = "default"

// NewRouter validates rules and makes one view of store per subset.
func NewRouter(store *snapshot.Store, rules Rules) (*Router, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	r := &Router{store: store, subsets: rules.Subsets}
	for i := range rules.Subsets {
		services := rules.Subsets[i].Services
		r.views = append(r.views, store.NewView(func(res *snapshot.Resource) bool {
			return services.Keeps(res.Origin)
		}))
	}
	return r, nil
}

// Route returns the source sink is served from and the name of its subset.
func (r *Router) Route(sink snapshot.Client) (name string, src snapshot.Source) {
	for i := range r.subsets {
		if r.subsets[i].Sinks.Selects(sink) {
			return r.subsets[i].Name, r.views[i]
		}
	}
	return DefaultName, r.store
}

// Views lists each subset's name and current snapshot, for status pages.
func (r *Router) Views() map[string]*snapshot.Snapshot {
	if r == nil {
		return nil
	}
	out := make(map[string]*snapshot.Snapshot, len(r.views))
	for i, v := range r.views {
		out[r.subsets[i].Name] = v.Current()
	}
	return out
}

// Load reads rules from a YAML (or JSON) file, strictly: an unknown key is
// an error, so a misspelt selector cannot silently select everything.
func Load(file string) (Rules, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Rules{}, err
	}
	return Parse(data, file)
}

// Parse is Load for bytes; name is used in errors.
func Parse(data []byte, name string) (Rules, error) {
	var rules Rules
	if len(bytes.TrimSpace(data)) == 0 {
		return rules, fmt.Errorf("%s: empty; give at least one subset under 'subsets:'", name)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a misspelt key is an error, not a selector that selects everything
	if err := dec.Decode(&rules); err != nil {
		return Rules{}, fmt.Errorf("%s: %w", name, err)
	}
	if err := rules.Validate(); err != nil {
		return Rules{}, fmt.Errorf("%s: %w", name, err)
	}
	return rules, nil
}
