package nacos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
)

// Discovery finds the services to watch: the service listing of every (namespace, group)
// watched, read page by page every --nacos-discovery-interval. A push says what changed in a
// service the adapter subscribed to; only a listing says that a service was created or
// deleted, so a new service appears within one interval (plus one Subscribe), and a deleted
// one is unsubscribed and removed.
//
// Every group: Nacos's naming API lists the services of one group (ServiceListRequest,
// /v1/ns/service/list), and no API of it lists the groups. So "every group" is read from the
// listing of DEFAULT_GROUP as the server answers it: Alibaba's Nacos lists that group's
// services there, and Polaris's Nacos API lists every service of the namespace, another
// group's as "group__service" (its model.HandleServiceListRequest; GetGroupName and
// GetServiceName split the name so). A DEFAULT_GROUP name of that form whose group is watched
// (every group, or one --nacos-groups names) is read as that group's service: over gRPC,
// Polaris answers the DEFAULT_GROUP spelling with no instance, over HTTP with the group's
// (it strips "DEFAULT_GROUP__"), which would serve one service twice. The price, on Alibaba's
// Nacos only: a DEFAULT_GROUP service named "group__service" after a watched group is not
// watched as such (documented).

// listingKey names one listing: a namespace and a group.
type listingKey struct{ namespace, group string }

// polarisGroupSep is how Polaris joins a group and a service in one name (its
// ReplaceNacosGroupConnectStr).
const polarisGroupSep = "__"

// discovery is what the last listings said; the watch's goroutine owns it.
type discovery struct {
	// namespaces are those watched when every namespace is (--nacos-namespaces "*"): the
	// server's last answer.
	namespaces []string
	// listed are the service names of each listing as last accepted.
	listed map[listingKey][]string
	// suspect are listings whose last answer would have removed every service, or most: held
	// (not applied) until the next answer confirms it.
	suspect map[listingKey]bool
	// nsTold: a failure to list the namespaces was logged (once an episode).
	nsTold bool
	// overTold: the services over --nacos-max-services were logged (once an episode).
	overTold bool
}

func newDiscovery() *discovery {
	return &discovery{listed: map[listingKey][]string{}, suspect: map[listingKey]bool{}}
}

// discoverErr is a listing the server refused (an error answer, an unreadable one): the
// round is incomplete, so it removes nothing.
type discoverErr struct{ err error }

func (e *discoverErr) Error() string { return e.err.Error() }
func (e *discoverErr) Unwrap() error { return e.err }

// discover reads every listing watched and returns the services to watch, sorted and bounded
// by --nacos-max-services. A transport error (the server is gone) is returned as it is; an
// answer of the server that is an error, or cannot be read, as a *discoverErr after the
// listings that answered were read (the caller keeps what the failed ones listed before).
func (w *watcher) discover(ctx context.Context, sess session) ([]wire.Ref, error) {
	start := time.Now()
	d := w.disc
	namespaces, err := w.namespaces(ctx, sess)
	if err != nil {
		return nil, err
	}
	groups := w.r.scope.groups
	allGroups := len(groups) == 0
	if allGroups {
		groups = []string{DefaultGroup}
	}
	var failures []error
	want := map[wire.Ref]bool{}
	for _, ns := range namespaces {
		for _, g := range groups {
			lk := listingKey{ns, g}
			names, err := w.listAll(ctx, sess, ns, g)
			switch {
			case err != nil && !answered(err):
				return nil, err
			case err != nil:
				failures = append(failures, fmt.Errorf("listing the services of namespace %q group %s: %w", ns, g, err))
				names = d.listed[lk] // the last answer stands
			default:
				names = d.accept(w, lk, names)
			}
			for _, name := range names {
				if ref := listedRef(ns, g, name, allGroups, groups); !w.svcs.mapper.unwatched(ref) {
					want[ref] = true
				}
			}
		}
	}
	// Forget the listings no longer watched (a namespace gone).
	for lk := range d.listed {
		if !slices.Contains(namespaces, lk.namespace) {
			delete(d.listed, lk)
			delete(d.suspect, lk)
		}
	}
	refs := slices.SortedFunc(maps.Keys(want), compareRefs)
	over := len(refs) - w.r.cfg.MaxServices
	w.r.metrics.overLimit.Set(float64(max(over, 0)))
	if over > 0 {
		if !d.overTold {
			w.r.log.Warn("more Nacos services than --"+flagMaxServices+": those after the first in namespace, group, name order are not watched",
				"listed", len(refs), "max", w.r.cfg.MaxServices)
			d.overTold = true
		}
		refs = refs[:w.r.cfg.MaxServices]
	} else {
		d.overTold = false
	}
	w.r.metrics.discoveryDuration.Observe(time.Since(start).Seconds())
	if len(failures) > 0 {
		return refs, &discoverErr{errors.Join(failures...)}
	}
	return refs, nil
}

// listedRef is the service a name in the listing of (ns, g) stands for: a name Polaris lists
// under DEFAULT_GROUP for another group's service ("group__service", polarisName) is that
// group's service when the group is watched (every group, or one of groups).
func listedRef(ns, g, name string, allGroups bool, groups []string) wire.Ref {
	if g == DefaultGroup {
		if pg, ps, ok := polarisName(name); ok && (allGroups || slices.Contains(groups, pg)) {
			return wire.Ref{Namespace: ns, Group: pg, Service: ps}
		}
	}
	return wire.Ref{Namespace: ns, Group: g, Service: name}
}

// polarisName splits a name Polaris lists under DEFAULT_GROUP for another group's service:
// "group__service".
func polarisName(name string) (group, service string, ok bool) {
	parts := strings.Split(name, polarisGroupSep)
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" || parts[0] == DefaultGroup {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// answered says whether err is an answer of the server (an error it sent, or one that could
// not be read) rather than a failure to reach it.
func answered(err error) bool {
	if _, ok := errors.AsType[*wire.ServerError](err); ok {
		return true
	}
	_, ok := errors.AsType[*wire.DecodeError](err)
	return ok
}

// accept applies the rule for a listing that would remove every service of (namespace, group)
// or more than half of them: it is held the first time (the last answer stands) and applied
// when the next answer says the same. A server restarted empty, or one not yet synced with
// its peers, answers so; the core holds large removals too (--removal-hold), this spares it
// the churn of one bad answer. It returns the names to use.
func (d *discovery) accept(w *watcher, lk listingKey, names []string) []string {
	held := d.listed[lk]
	slices.Sort(names)
	names = slices.Compact(names)
	if len(held) == 0 {
		d.listed[lk] = names
		delete(d.suspect, lk)
		return names
	}
	removing := 0
	for _, n := range held {
		if _, found := slices.BinarySearch(names, n); !found {
			removing++
		}
	}
	suspicious := len(names) == 0 || 2*removing > len(held)
	switch {
	case suspicious && !d.suspect[lk]:
		d.suspect[lk] = true
		w.r.log.Warn("a Nacos service listing would remove most services: holding it until the next listing confirms it",
			"namespace", lk.namespace, "group", lk.group, "held", len(held), "listed", len(names), "removing", removing)
		return held
	case suspicious:
		w.r.log.Warn("a second Nacos listing confirms the removal: applying it",
			"namespace", lk.namespace, "group", lk.group, "listed", len(names), "removing", removing)
	}
	delete(d.suspect, lk)
	d.listed[lk] = names
	return names
}

// namespaces are the namespaces watched now: those configured, or every one the server lists.
func (w *watcher) namespaces(ctx context.Context, sess session) ([]string, error) {
	if w.r.scope.namespaces != nil {
		return w.r.scope.namespaces, nil
	}
	d := w.disc
	ids, err := sess.http().Namespaces(ctx)
	w.count(reqNamespaces, err)
	if err != nil {
		if !answered(err) {
			return nil, err
		}
		if !d.nsTold {
			w.r.log.Warn("the Nacos server does not list its namespaces (--"+flagNamespaces+" \"*\"): watching those it listed last",
				"namespaces", len(d.namespaces), "err", w.r.redact.error(err))
			d.nsTold = true
		}
		if d.namespaces == nil {
			return []string{""}, nil // the default namespace, at least
		}
		return d.namespaces, nil
	}
	d.nsTold = false
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) > maxNamespaces {
		w.r.log.Warn("the Nacos server lists more namespaces than are watched: the first in ID order are", "listed", len(ids), "max", maxNamespaces)
		ids = ids[:maxNamespaces]
	}
	d.namespaces = ids
	return ids, nil
}

// listAll reads the services of (namespace, group): one page of --nacos-page-size, and when
// there are more, all of them in one page as large as the count the server gave.
//
// Pages are not a consistent view: neither Nacos nor Polaris orders its listing (both iterate
// a hash set or map), so a service added or removed between two pages shifts the others, and
// Polaris's order differs between two calls even when nothing changed (seen in
// TestPolarisWatchPaging: pages that repeat some names and miss others). One page is one
// snapshot. Polaris (model.HandleServiceListRequest) also answers the namespace's count
// whatever the group, pads the pages of a group other than DEFAULT_GROUP with empty names up
// to that count (it slices the group's names within the capacity of the namespace's), and
// crashes (an unrecovered slice panic) when asked for a page that starts past the group's
// names and ends past the namespace's count; a first page never does. Empty names are
// dropped.
//
// Should a server cap the page size below its count, the rest is read page by page from
// there, the names merged.
func (w *watcher) listAll(ctx context.Context, sess session, namespace, group string) ([]string, error) {
	size := w.r.cfg.PageSize
	limit := w.r.cfg.MaxServices
	p, err := w.listPage(ctx, sess, namespace, group, 1, size)
	if err != nil {
		return nil, err
	}
	names, complete := realNames(nil, p.Names, size)
	if complete {
		return names, nil
	}
	// More than a page: all at once, up to one more than the limit (to see it is over).
	size = min(max(p.Count, len(p.Names))+1, limit+1)
	p, err = w.listPage(ctx, sess, namespace, group, 1, size)
	if err != nil {
		return nil, err
	}
	names, complete = realNames(nil, p.Names, size)
	for page := 2; !complete && len(names) <= limit; page++ {
		p, err := w.listPage(ctx, sess, namespace, group, page, size)
		if err != nil {
			return nil, err
		}
		names, complete = realNames(names, p.Names, size)
	}
	return names, nil
}

// listPage reads one page, counted.
func (w *watcher) listPage(ctx context.Context, sess session, namespace, group string, pageNo, size int) (wire.ServicePage, error) {
	p, err := sess.list(ctx, namespace, group, pageNo, size)
	w.count(reqList, err)
	return p, err
}

// realNames appends the names of a page of size to names, without empty ones, and says
// whether the listing is complete: the page was short, or padded with empty names.
func realNames(names, page []string, size int) ([]string, bool) {
	padded := false
	for _, n := range page {
		if n == "" {
			padded = true
			continue
		}
		names = append(names, n)
	}
	return names, padded || len(page) < size
}
