package registrytest

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/galleon-mesh/galleon/model"
)

// Diff compares two services by meaning, as TestRegistry does before any
// IgnoreFields or WithNormalize option applies, and describes the
// differences one a line ("" when equal). Registry is not compared.
//
// Equal by meaning are: lists that are sets (Hosts, Addresses, ExportTo,
// Instances by ID) in any order, Ports in any order, nil and empty lists
// and maps, a port Protocol in any case (and "" with TCP), a port Name ""
// and its default "<protocol>-<number>", and an instance port mapped to
// its own number and one not mapped at all.
func Diff(want, got model.Service) string {
	return diffCanonical(canonical(want), canonical(got))
}

// canonical is the form the kit compares services in (model.Canonical).
func canonical(s model.Service) model.Service { return model.Canonical(s) }

// diffCanonical describes the differences of two canonical services.
func diffCanonical(want, got model.Service) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	var lines []string
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	st := wv.Type()
	for i := range st.NumField() {
		name := st.Field(i).Name
		if name == "Instances" {
			lines = append(lines, diffInstances(want.Instances, got.Instances)...)
			continue
		}
		if w, g := wv.Field(i).Interface(), gv.Field(i).Interface(); !reflect.DeepEqual(w, g) {
			lines = append(lines, fmt.Sprintf("%s: want %s, got %s", name, show(w), show(g)))
		}
	}
	return strings.Join(lines, "\n")
}

func diffInstances(want, got []model.Instance) []string {
	byID := func(list []model.Instance) map[string]model.Instance {
		m := make(map[string]model.Instance, len(list))
		for _, inst := range list {
			m[inst.ID] = inst
		}
		return m
	}
	wm, gm := byID(want), byID(got)
	var lines []string
	for _, w := range want {
		g, ok := gm[w.ID]
		if !ok {
			lines = append(lines, fmt.Sprintf("instance %q: missing (want %s)", w.ID, show(w)))
			continue
		}
		wv, gv := reflect.ValueOf(w), reflect.ValueOf(g)
		for i := range wv.NumField() {
			if a, b := wv.Field(i).Interface(), gv.Field(i).Interface(); !reflect.DeepEqual(a, b) {
				lines = append(lines, fmt.Sprintf("instance %q: %s: want %s, got %s", w.ID, wv.Type().Field(i).Name, show(a), show(b)))
			}
		}
	}
	for _, g := range got {
		if _, ok := wm[g.ID]; !ok {
			lines = append(lines, fmt.Sprintf("instance %q: unexpected (got %s)", g.ID, show(g)))
		}
	}
	if len(lines) == 0 && len(want) != len(got) {
		// Duplicate IDs: the maps hide them.
		lines = append(lines, fmt.Sprintf("Instances: want %d, got %d (duplicate IDs?)", len(want), len(got)))
	}
	return lines
}

// show formats a value for a diff, naming the model's enumerations.
func show(v any) string {
	switch v := v.(type) {
	case model.Health:
		switch v {
		case model.Healthy:
			return "Healthy"
		case model.Unhealthy:
			return "Unhealthy"
		case model.Draining:
			return "Draining"
		}
	case model.Location:
		switch v {
		case model.MeshInternal:
			return "MeshInternal"
		case model.MeshExternal:
			return "MeshExternal"
		}
	case model.Resolution:
		switch v {
		case model.ResolutionAuto:
			return "ResolutionAuto"
		case model.ResolutionStatic:
			return "ResolutionStatic"
		case model.ResolutionDNS:
			return "ResolutionDNS"
		case model.ResolutionNone:
			return "ResolutionNone"
		}
	case string:
		return strconv.Quote(v)
	case model.Instance:
		return fmt.Sprintf("{ID:%q Address:%q Ports:%v Labels:%v Locality:%q Network:%q Weight:%d Health:%s ServiceAccount:%q}",
			v.ID, v.Address, v.Ports, v.Labels, v.Locality, v.Network, v.Weight, show(v.Health), v.ServiceAccount)
	}
	return fmt.Sprintf("%+v", v)
}

// fieldFilter zeroes the fields named by IgnoreFields.
type fieldFilter struct {
	service  []int // field indexes in model.Service
	instance []int // field indexes in model.Instance
}

// newFieldFilter parses IgnoreFields names: a model.Service field
// ("Labels") or "Instances.<model.Instance field>" ("Instances.Weight").
func newFieldFilter(names []string) (*fieldFilter, error) {
	f := &fieldFilter{}
	svcType, instType := reflect.TypeFor[model.Service](), reflect.TypeFor[model.Instance]()
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, "Instances."); ok {
			sf, found := instType.FieldByName(rest)
			switch {
			case !found:
				return nil, fmt.Errorf("IgnoreFields(%q): model.Instance has no field %q", name, rest)
			case rest == "ID":
				return nil, fmt.Errorf("IgnoreFields(%q): instances are matched by ID; normalise IDs with WithNormalize instead", name)
			}
			f.instance = append(f.instance, sf.Index[0])
			continue
		}
		sf, found := svcType.FieldByName(name)
		switch {
		case !found:
			return nil, fmt.Errorf("IgnoreFields(%q): model.Service has no field %q (instance fields are \"Instances.<Field>\")", name, name)
		case name == "Namespace" || name == "Name":
			return nil, fmt.Errorf("IgnoreFields(%q): services are matched by namespace and name", name)
		}
		f.service = append(f.service, sf.Index[0])
	}
	return f, nil
}

// apply returns s with the ignored fields zeroed. It does not modify s.
func (f *fieldFilter) apply(s model.Service) model.Service {
	if len(f.service) > 0 {
		v := reflect.ValueOf(&s).Elem()
		for _, i := range f.service {
			v.Field(i).SetZero()
		}
	}
	if len(f.instance) > 0 && len(s.Instances) > 0 {
		insts := slices.Clone(s.Instances)
		for j := range insts {
			v := reflect.ValueOf(&insts[j]).Elem()
			for _, i := range f.instance {
				v.Field(i).SetZero()
			}
		}
		s.Instances = insts
	}
	return s
}
