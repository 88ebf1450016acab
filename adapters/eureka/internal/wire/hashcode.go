package wire

import (
	"slices"
	"strconv"
	"strings"
)

// Hashcode is the apps__hashcode of a registry by Eureka's rule (Netflix's
// Applications.getReconcileHashCode): the number of instances in each status across all
// applications, statuses in name order, each written STATUS_COUNT_, e.g.
// "DOWN_1_OUT_OF_SERVICE_2_UP_5_"; "" for no instances. A client whose copy of the registry
// gives the same string as the server's apps__hashcode holds as many instances in each status
// as the server: that is all the check proves, and all Netflix's client relies on to decide
// between applying deltas and fetching everything again.
//
// The status that counts is the one served (Instance.Status, to which the server has already
// applied any override), not overriddenstatus: Netflix's populateInstanceCountMap counts
// getStatus() of every instance "as is from eureka", UP or not. Skipped instances count too,
// under the status they were listed with: the server counted them, and leaving them out would
// make every comparison fail and every poll a full fetch.
func Hashcode(a *Applications) string { return HashcodeOf(StatusCounts(a)) }

// StatusCounts counts a registry's instances, servable and skipped, by status.
func StatusCounts(a *Applications) map[string]int {
	counts := map[string]int{}
	if a == nil {
		return counts
	}
	for _, app := range a.Apps {
		for _, in := range app.Instances {
			counts[in.Status]++
		}
	}
	for _, s := range a.Skipped {
		counts[s.Status]++
	}
	return counts
}

// HashcodeOf writes status counts by Eureka's rule (see Hashcode). Netflix keeps them in a
// TreeMap<String, ...>, whose order (UTF-16 code units) is byte order for the ASCII status names;
// zero counts, which Netflix's map never holds, are left out.
func HashcodeOf(counts map[string]int) string {
	statuses := make([]string, 0, len(counts))
	for st, n := range counts {
		if n > 0 {
			statuses = append(statuses, st)
		}
	}
	slices.Sort(statuses)
	var b strings.Builder
	for _, st := range statuses {
		b.WriteString(st)
		b.WriteByte('_')
		b.WriteString(strconv.Itoa(counts[st]))
		b.WriteByte('_')
	}
	return b.String()
}
