package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

const watchUsage = `Usage: galleonctl watch [flags]

Subscribes to an MCP-over-xDS source and prints every response until
interrupted (Ctrl-C), ACKing each one.

By default it opens a State-of-the-World stream, exactly like istiod: each
response is the full state of a type, and galleonctl works out what changed
since the previous one from each resource's metadata.version. With --delta
it opens a Delta stream (DeltaAggregatedResources, wildcard subscription)
and prints what each response adds, updates and removes.

Each response is summarised on one line:
  <arrival time, RFC 3339 ms> <Kind> <sotw|delta> version="<version_info>" nonce="<nonce>"
  resources=<total held> added=[ns/name ...] updated=[...] removed=[...]
Empty lists are left out. "(empty)" marks a first response with nothing in
it; "no changes" on a SotW stream means the source resent an unchanged state;
unchanged=[...] on a Delta stream lists resources resent without a change.

Output (-o):
  summary  the line above, long name lists shortened (default)
  names    the line, then every name: "+ added", "~ updated", "- removed",
           "= unchanged"
  yaml     the line as a "# comment", then each added/updated object as a YAML
           document (kubectl style)
  json     one JSON object per response, with the changed objects

Problems istiod would mind (resources it would drop, empty versions) are
reported on stderr as warnings.

Examples:
  # Follow the ServiceEntries of a local Galleon
  galleonctl watch
  # Full objects of every change, ServiceEntries and WorkloadEntries
  galleonctl watch --addr galleon.istio-system:16010 --type se,we -o yaml
  # Incremental stream, machine-readable
  galleonctl watch --addr 10.0.0.5:16010 --delta -o json | jq .
  # Legacy MCP, as an Istio 1.1 - 1.8 sink: incremental updates of ServiceEntries
  galleonctl watch --protocol mcp --incremental --addr galleon.istio-system:16010

With --protocol mcp it opens a legacy MCP stream (istio.mcp.v1alpha1.ResourceSource)
and subscribes to the collections (istio/networking/v1alpha3/serviceentries, ...),
asking for incremental updates with --incremental. Each response is one line:
  <arrival time> <collection> <full|incremental> version="<system_version_info>"
  nonce="<nonce>" resources=<total held> sent=<resources in the response>
  added=[...] updated=[...] removed=[...]
A full response replaces everything held before; an incremental one adds,
updates and removes (removed_resources).
`

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	var delta bool
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	o.register(fs)
	var incremental bool
	fs.BoolVar(&delta, "delta", false, "use a Delta (incremental) stream instead of SotW")
	fs.BoolVar(&incremental, "incremental", false, "with --protocol mcp: ask for incremental updates (after a first full state, only\nchanged resources and removed_resources), as an incremental Istio 1.x sink does")
	fs.StringVar(&o.output, "o", "summary", "output format: summary, names, yaml or json")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up if the first response has not arrived within this time (0: wait forever)")
	if code := parse(fs, args, watchUsage, stdout, stderr); code >= 0 {
		return code
	}
	types, err := o.subscriptions()
	if err == nil && delta && o.protocol == "mcp" {
		err = errors.New("--delta is for MCP over xDS; legacy MCP asks for incremental updates with --incremental")
	}
	if err == nil && incremental && o.protocol != "mcp" {
		err = errors.New("--incremental is for --protocol mcp; MCP over xDS streams incremental updates with --delta")
	}
	switch o.output {
	case "summary", "names", "yaml", "json":
	default:
		if err == nil {
			err = fmt.Errorf("-o %q: use summary, names, yaml or json", o.output)
		}
	}
	if err == nil && o.timeout < 0 {
		err = fmt.Errorf("--timeout %v: must not be negative", o.timeout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "galleonctl watch: %v\n", err)
		return 2
	}

	conn, err := o.dial()
	if err != nil {
		fmt.Fprintf(stderr, "galleonctl watch: %v\n", err)
		return 1
	}
	defer conn.Close()

	w := &watcher{opts: o, out: stdout, errOut: stderr, state: map[string]map[string]xdsclient.Resource{}}
	switch {
	case o.protocol == "mcp":
		err = w.legacy(ctx, conn, types, incremental)
	case delta:
		err = w.delta(ctx, conn, types)
	default:
		err = w.sotw(ctx, conn, types)
	}
	switch {
	case err == nil, ctx.Err() != nil: // interrupted: the normal way to stop
		return 0
	default:
		fmt.Fprintf(stderr, "galleonctl watch: %v\n", err)
		return 1
	}
}

// watcher prints the responses of one watch stream.
type watcher struct {
	opts   options
	out    io.Writer
	errOut io.Writer
	// state is what the source has sent so far, by type URL and name.
	state map[string]map[string]xdsclient.Resource
}

// firstResponse arms --timeout on a stream context: it returns the
// context, and a function to call when a response arrived.
func (w *watcher) firstResponse(ctx context.Context) (context.Context, func(), func()) {
	streamCtx, cancel := context.WithCancelCause(ctx)
	if w.opts.timeout <= 0 {
		return streamCtx, func() {}, func() { cancel(nil) }
	}
	timer := time.AfterFunc(w.opts.timeout, func() { cancel(errTimedOut) })
	return streamCtx, func() { timer.Stop() }, func() { timer.Stop(); cancel(nil) }
}

// streamErr explains why a stream ended; ctx is the stream's context,
// source says what kind of source was expected, and rpcErr explains an
// error from the RPC itself.
func (w *watcher) streamErr(ctx context.Context, err error, source string, rpcErr func(error) string) error {
	if errors.Is(context.Cause(ctx), errTimedOut) {
		return fmt.Errorf("no response from %s within %v: is it %s?", w.opts.addr, w.opts.timeout, source)
	}
	if ctx.Err() != nil {
		return nil // interrupted
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s closed the stream", w.opts.addr)
	}
	return errors.New(rpcErr(err))
}

func (w *watcher) xdsErr(ctx context.Context, err error, delta bool) error {
	return w.streamErr(ctx, err, "an MCP-over-xDS source serving that type",
		func(err error) string { return explain(err, w.opts.addr, delta) })
}

func (w *watcher) legacyErr(ctx context.Context, err error) error {
	return w.streamErr(ctx, err, "a legacy MCP source serving that collection",
		func(err error) string { return explainLegacy(err, w.opts.addr) })
}

func (w *watcher) sotw(ctx context.Context, conn *grpc.ClientConn, types []string) error {
	ctx, gotResponse, stop := w.firstResponse(ctx)
	defer stop()
	stream, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode(w.opts.nodeID), types)
	if err != nil {
		return w.xdsErr(ctx, err, false)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return w.xdsErr(ctx, err, false)
		}
		gotResponse()
		// ACK before printing: a slow terminal must not hold back the source.
		if err := stream.ACK(resp); err != nil {
			return w.xdsErr(ctx, err, false)
		}
		w.warn(resp.TypeURL, resp.Errors, resp.Resources)

		prev, seen := w.state[resp.TypeURL]
		e := &event{
			Time: timestamp(resp.Received), TypeURL: resp.TypeURL, Mode: "sotw",
			Version: resp.VersionInfo, Nonce: resp.Nonce, First: !seen,
		}
		next := applyFull(e, prev, resp.Resources)
		w.state[resp.TypeURL] = next
		if err := w.print(e, next); err != nil {
			return err
		}
	}
}

func (w *watcher) delta(ctx context.Context, conn *grpc.ClientConn, types []string) error {
	ctx, gotResponse, stop := w.firstResponse(ctx)
	defer stop()
	stream, err := xdsclient.OpenDelta(ctx, conn, xdsclient.NewNode(w.opts.nodeID), types)
	if err != nil {
		return w.xdsErr(ctx, err, true)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return w.xdsErr(ctx, err, true)
		}
		gotResponse()
		if err := stream.ACK(resp); err != nil {
			return w.xdsErr(ctx, err, true)
		}
		w.warn(resp.TypeURL, resp.Errors, resp.Resources)

		held, seen := w.state[resp.TypeURL]
		if !seen {
			held = map[string]xdsclient.Resource{}
			w.state[resp.TypeURL] = held
		}
		e := &event{
			Time: timestamp(resp.Received), TypeURL: resp.TypeURL, Mode: "delta",
			Version: resp.SystemVersionInfo, Nonce: resp.Nonce, First: !seen,
		}
		for _, name := range applyIncremental(e, held, resp.Resources, resp.Removed) {
			fmt.Fprintf(w.errOut, "warning: %s: removal of %q, which was never sent\n", resp.TypeURL, name)
		}
		if err := w.print(e, byKey(resp.Resources)); err != nil {
			return err
		}
	}
}

// legacy watches a legacy MCP stream.
func (w *watcher) legacy(ctx context.Context, conn *grpc.ClientConn, collections []string, incremental bool) error {
	ctx, gotResponse, stop := w.firstResponse(ctx)
	defer stop()
	stream, err := xdsclient.OpenLegacy(ctx, conn, w.opts.nodeID, collections, incremental)
	if err != nil {
		return w.legacyErr(ctx, err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return w.legacyErr(ctx, err)
		}
		gotResponse()
		if err := stream.ACK(resp); err != nil {
			return w.legacyErr(ctx, err)
		}
		w.warn(resp.Collection, resp.Errors, resp.Resources)
		held, seen := w.state[resp.Collection]
		e, next := applyLegacy(held, resp)
		e.First = !seen
		w.state[resp.Collection] = next
		if err := w.print(e, byKey(resp.Resources)); err != nil {
			return err
		}
	}
}

// applyLegacy applies a legacy MCP response to what is held (by name) and
// returns the event to print and what is held after it.
func applyLegacy(held map[string]xdsclient.Resource, resp *xdsclient.LegacyResponse) (*event, map[string]xdsclient.Resource) {
	e := &event{
		Time: timestamp(resp.Received), TypeURL: resp.Collection, Mode: "full",
		Version: resp.SystemVersionInfo, Nonce: resp.Nonce, Sent: new(len(resp.Resources)),
	}
	if !resp.Incremental {
		return e, applyFull(e, held, resp.Resources)
	}
	e.Mode = "incremental"
	next := maps.Clone(held)
	if next == nil {
		next = map[string]xdsclient.Resource{}
	}
	applyIncremental(e, next, resp.Resources, resp.Removed)
	return e, next
}

// applyFull applies a full-state response: it replaces what was held. It
// fills e's changes and count and returns what is held now, by name.
func applyFull(e *event, held map[string]xdsclient.Resource, resources []xdsclient.Resource) map[string]xdsclient.Resource {
	d := xdsclient.DiffSotW(slices.Collect(maps.Values(held)), resources)
	e.Added, e.Updated, e.Removed = d.Added, d.Updated, d.Removed
	next := make(map[string]xdsclient.Resource, len(resources))
	for _, r := range resources {
		if _, dup := next[r.Key()]; !dup {
			next[r.Key()] = r
		}
	}
	e.Resources = len(next)
	return next
}

// applyIncremental applies changed resources and removals to held, in
// place, and fills e's changes and count. It returns the removed names that
// were never held, which a correct source does not send.
func applyIncremental(e *event, held map[string]xdsclient.Resource, resources []xdsclient.Resource, removed []string) (unknown []string) {
	for _, r := range resources {
		old, ok := held[r.Key()]
		switch {
		case !ok:
			e.Added = append(e.Added, r.Key())
		case xdsclient.Changed(&old, &r):
			e.Updated = append(e.Updated, r.Key())
		default:
			e.Unchanged = append(e.Unchanged, r.Key())
		}
		held[r.Key()] = r
	}
	for _, name := range removed {
		if _, ok := held[name]; !ok {
			unknown = append(unknown, name)
		}
		delete(held, name)
		e.Removed = append(e.Removed, name)
	}
	sort.Strings(e.Added)
	sort.Strings(e.Updated)
	sort.Strings(e.Unchanged)
	sort.Strings(e.Removed)
	e.Resources = len(held)
	return unknown
}

// byKey indexes resources by name.
func byKey(resources []xdsclient.Resource) map[string]xdsclient.Resource {
	m := make(map[string]xdsclient.Resource, len(resources))
	for _, r := range resources {
		m[r.Key()] = r
	}
	return m
}

// print writes e, with the added and updated objects from byName when the
// output format shows objects.
func (w *watcher) print(e *event, byName map[string]xdsclient.Resource) error {
	e.Kind = kindOf(e.TypeURL)
	if w.opts.output == "yaml" || w.opts.output == "json" {
		for _, names := range [][]string{e.Added, e.Updated} {
			for _, name := range names {
				r := byName[name]
				obj, err := r.Object()
				if err != nil {
					fmt.Fprintf(w.errOut, "warning: %v\n", err)
				}
				e.Objects = append(e.Objects, obj)
			}
		}
	}
	if err := writeEvent(w.out, w.opts.output, e); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	return nil
}

// warn reports on stderr what istiod would mind in a response.
func (w *watcher) warn(typeURL string, bad []xdsclient.ResourceError, resources []xdsclient.Resource) {
	for _, e := range bad {
		fmt.Fprintf(w.errOut, "warning: %s %v\n", typeURL, e)
	}
	noVersion := 0
	seen := map[string]bool{}
	for i := range resources {
		if resources[i].Version == "" {
			noVersion++
		}
		if k := resources[i].Key(); seen[k] {
			fmt.Fprintf(w.errOut, "warning: %s: %s is sent twice in one response\n", typeURL, k)
		} else {
			seen[k] = true
		}
	}
	if noVersion > 0 {
		fmt.Fprintf(w.errOut, "warning: %s: %d resource(s) have an empty metadata.version: istiod re-applies them on every push\n", typeURL, noVersion)
	}
}

// kindOf is the short name of a type URL for summaries; a legacy MCP
// collection is shown as it is.
func kindOf(typeURL string) string {
	if isLegacyCollection(typeURL) {
		return typeURL
	}
	_, kind := xdsclient.GroupVersionKind(typeURL, typeURL)
	return kind
}
