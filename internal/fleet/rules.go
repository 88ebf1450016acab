package fleet

import (
	"fmt"
	"strings"

	"github.com/galleon-mesh/galleon/model"
)

// Action is what a HostRule does with a host that several registries have.
type Action string

// The actions of a HostRule.
const (
	// Merge serves the union of the registries' instances under one
	// ServiceEntry. Their ports (numbers and protocols) must agree; when
	// they do not, the collision is reported as a conflict and the host is
	// served as if no rule named it.
	Merge Action = "merge"
	// Prefer serves the host from the first registry of HostRule.Prefer
	// that has it with at least one instance (then registries the rule does
	// not name, in the order of the registry list); the others' instances
	// are left out while it has any.
	Prefer Action = "prefer"
	// Reject serves the host from no registry while more than one has it.
	Reject Action = "reject"
)

// Outcomes of a collision, as reported in /debug/status and as the value
// of the outcome label of galleon_fleet_host_collisions.
const (
	OutcomeMerged    = "merged"    // Merge: the instances of every registry served
	OutcomePreferred = "preferred" // Prefer: one registry's instances served
	OutcomeRejected  = "rejected"  // Reject: nothing served
	OutcomeConflict  = "conflict"  // Merge whose registries' ports disagree: served as unplanned
	OutcomeUnplanned = "unplanned" // no rule: the registry listed first is served
)

// outcomes lists every outcome, for the metric's label values.
func outcomes() []string {
	return []string{OutcomeMerged, OutcomePreferred, OutcomeRejected, OutcomeConflict, OutcomeUnplanned}
}

// HostRule decides what is served for hosts that more than one registry
// service has (in the same registry or in several).
type HostRule struct {
	// Host is an exact host ("orders.mesh") or a pattern whose first label
	// is "*" ("*.mesh"), which matches every host ending in ".mesh".
	Host   string
	Action Action
	// Prefer lists registry names, most preferred first (Action Prefer).
	Prefer []string
}

// check reports what is wrong with r, given the registries of the list.
func (r HostRule) check(registries map[string]bool) error {
	host := strings.TrimPrefix(r.Host, "*.")
	if r.Host == "" || model.HostName(host) != strings.ToLower(host) || strings.Contains(host, "*") {
		return fmt.Errorf("host %q: want a host name (orders.mesh) or a pattern of one (*.mesh)", r.Host)
	}
	switch r.Action {
	case Merge, Reject:
		if len(r.Prefer) > 0 {
			return fmt.Errorf("host %q: prefer lists registries, which only the prefer action reads", r.Host)
		}
	case Prefer:
		if len(r.Prefer) == 0 {
			return fmt.Errorf("host %q: prefer needs the registries, most preferred first", r.Host)
		}
		seen := map[string]bool{}
		for _, name := range r.Prefer {
			if !registries[name] {
				return fmt.Errorf("host %q: prefer names registry %q, which the list does not have", r.Host, name)
			}
			if seen[name] {
				return fmt.Errorf("host %q: prefer names registry %q twice", r.Host, name)
			}
			seen[name] = true
		}
	default:
		return fmt.Errorf("host %q: action %q: want merge, prefer or reject", r.Host, r.Action)
	}
	return nil
}

// matches reports whether r applies to host (sanitised, lower case).
func (r HostRule) matches(host string) bool {
	pattern := strings.ToLower(r.Host)
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return host == pattern
}

// CheckRules reports every rule that is wrong, and hosts that two rules
// name alike, given the names of the registries of the list.
func CheckRules(rules []HostRule, registries []string) error {
	known := map[string]bool{}
	for _, name := range registries {
		known[name] = true
	}
	var problems []string
	seen := map[string]bool{}
	for i, r := range rules {
		if err := r.check(known); err != nil {
			problems = append(problems, fmt.Sprintf("hosts[%d]: %v", i, err))
			continue
		}
		key := strings.ToLower(r.Host)
		if seen[key] {
			problems = append(problems, fmt.Sprintf("hosts[%d]: host %q has a rule already (the first that matches applies: remove one)", i, r.Host))
		}
		seen[key] = true
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}

// ruleFor returns the rule for host: an exact rule first, else the first
// pattern that matches in the order listed; nil when none.
func ruleFor(rules []HostRule, host string) *HostRule {
	for i := range rules {
		if !strings.HasPrefix(rules[i].Host, "*") && rules[i].matches(host) {
			return &rules[i]
		}
	}
	for i := range rules {
		if strings.HasPrefix(rules[i].Host, "*") && rules[i].matches(host) {
			return &rules[i]
		}
	}
	return nil
}
