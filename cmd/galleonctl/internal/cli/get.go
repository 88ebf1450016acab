package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

const getUsage = `Usage: galleonctl get [flags]

Opens a State-of-the-World ADS stream to an MCP-over-xDS source, subscribes to
each requested type like istiod does, waits for the first response of each,
ACKs it, prints the resources as kubectl would and exits.

Output (-o):
  yaml   a kubectl-style List: apiVersion/kind from the type URL, metadata
         (name, namespace, creationTimestamp, resourceVersion = MCP version,
         labels, annotations) and spec (the body, camelCase fields) (default)
  json   the same List as JSON
  names  one <namespace>/<name> per line (<Kind>/<namespace>/<name> when
         several types are requested)

Exit status: 0 on success; 1 if the source cannot be reached, does not answer
every type within --timeout, or sends resources istiod would drop (they are
listed on stderr); 2 on bad usage.

Examples:
  # Every ServiceEntry a local Galleon serves
  galleonctl get
  # What an istiod 1.23 would get (it asks for v1alpha3)
  galleonctl get --addr galleon.istio-system:16010 --api-version v1alpha3
  # ServiceEntries and WorkloadEntries, names only
  galleonctl get --addr 10.0.0.5:16010 --type se,we -o names
  # Any collection of any source, by its full type URL
  galleonctl get --addr istiod.istio-system:15010 --type networking.istio.io/v1/DestinationRule -o json
  # The same ServiceEntries over legacy MCP, as an Istio 1.8 sink gets them
  # (collection istio/networking/v1alpha3/serviceentries)
  galleonctl get --protocol mcp --addr galleon.istio-system:16010

With --protocol mcp, get opens a legacy MCP stream (istio.mcp.v1alpha1.ResourceSource),
subscribes to each collection without incremental updates, ACKs the first full
state of each and prints it the same way.
`

// drainGrace bounds the wait for the source to end the stream after the
// last ACK, so the ACK is read before the connection goes away.
const drainGrace = time.Second

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	o.register(fs)
	fs.StringVar(&o.output, "o", "yaml", "output format: yaml, json or names")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up if the source has not answered every type within this time")
	if code := parse(fs, args, getUsage, stdout, stderr); code >= 0 {
		return code
	}
	types, err := o.subscriptions()
	if err == nil && o.output != "yaml" && o.output != "json" && o.output != "names" {
		err = fmt.Errorf("-o %q: use yaml, json or names", o.output)
	}
	if err == nil && o.timeout <= 0 {
		err = fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "galleonctl get: %v\n", err)
		return 2
	}

	fetch := get
	if o.protocol == "mcp" {
		fetch = getLegacy
	}
	byType, bad, err := fetch(ctx, o, types)
	if err != nil {
		fmt.Fprintf(stderr, "galleonctl get: %v\n", err)
		return 1
	}

	var objects []xdsclient.Object
	var names []string
	for _, t := range types {
		resources := byType[t]
		sort.Slice(resources, func(i, j int) bool { return resources[i].Key() < resources[j].Key() })
		for i := range resources {
			r := &resources[i]
			if o.output == "names" {
				name := r.Key()
				if len(types) > 1 {
					_, kind := xdsclient.GroupVersionKind(t, r.Body.GetTypeUrl())
					name = kind + "/" + name
				}
				names = append(names, name)
				continue
			}
			obj, err := r.Object()
			if err != nil {
				// Still print the metadata: the spec is only missing because
				// this galleonctl does not know the body's type.
				fmt.Fprintf(stderr, "warning: %v\n", err)
			}
			objects = append(objects, obj)
		}
	}
	switch o.output {
	case "names":
		if len(names) > 0 {
			fmt.Fprintln(stdout, strings.Join(names, "\n"))
		}
	default:
		if err := writeList(stdout, o.output, objects); err != nil {
			fmt.Fprintf(stderr, "galleonctl get: %v\n", err)
			return 1
		}
	}

	for _, e := range bad {
		fmt.Fprintf(stderr, "error: %v\n", e)
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "galleonctl get: %d resource(s) would be dropped by istiod\n", len(bad))
		return 1
	}
	return 0
}

// get fetches the first response of each type. It returns the resources
// by type and the resources that could not be unwrapped.
func get(ctx context.Context, o options, types []string) (map[string][]xdsclient.Resource, []error, error) {
	return fetchFirst(ctx, o, types, func(ctx context.Context, conn *grpc.ClientConn) (fetchStream, error) {
		s, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode(o.nodeID), types)
		if err != nil {
			return nil, err
		}
		return sotwFetch{s}, nil
	})
}

// getLegacy is get over legacy MCP: the first (full-state) response of each
// collection, ACKed.
func getLegacy(ctx context.Context, o options, collections []string) (map[string][]xdsclient.Resource, []error, error) {
	return fetchFirst(ctx, o, collections, func(ctx context.Context, conn *grpc.ClientConn) (fetchStream, error) {
		s, err := xdsclient.OpenLegacy(ctx, conn, o.nodeID, collections, false)
		if err != nil {
			return nil, err
		}
		return legacyFetch{s}, nil
	})
}

// fetchStream is what get needs of a stream, whichever the protocol.
type fetchStream interface {
	// next receives one response and ACKs it (everything is ACKed,
	// requested or not, as istiod does: an unACKed response may hold back
	// the next one of its type). key is its type URL or collection.
	next() (key string, resources []xdsclient.Resource, bad []xdsclient.ResourceError, err error)
	// discard receives one response and ignores it: draining after
	// CloseSend, when nothing more may be sent.
	discard() error
	CloseSend() error
}

type sotwFetch struct{ *xdsclient.SotWStream }

func (s sotwFetch) next() (string, []xdsclient.Resource, []xdsclient.ResourceError, error) {
	resp, err := s.Recv()
	if err == nil {
		err = s.ACK(resp)
	}
	if err != nil {
		return "", nil, nil, err
	}
	return resp.TypeURL, resp.Resources, resp.Errors, nil
}

func (s sotwFetch) discard() error { _, err := s.Recv(); return err }

type legacyFetch struct{ *xdsclient.LegacyStream }

func (s legacyFetch) discard() error { _, err := s.Recv(); return err }

func (s legacyFetch) next() (string, []xdsclient.Resource, []xdsclient.ResourceError, error) {
	resp, err := s.Recv()
	if err == nil {
		err = s.ACK(resp)
	}
	if err != nil {
		return "", nil, nil, err
	}
	return resp.Collection, resp.Resources, resp.Errors, nil
}

// fetchFirst opens a stream for keys (type URLs or collections) and returns
// the resources of the first response of each.
func fetchFirst(ctx context.Context, o options, keys []string,
	open func(context.Context, *grpc.ClientConn) (fetchStream, error)) (map[string][]xdsclient.Resource, []error, error) {
	conn, err := o.dial()
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	f := &failure{opts: o, conn: conn}

	// The timeout cancels the stream with errTimedOut as the cause (to tell
	// it from Ctrl-C). It is disarmed once every type has answered, which
	// leaves drainGrace for the source to read the last ACK.
	streamCtx, cancelStream := context.WithCancelCause(ctx)
	defer cancelStream(nil)
	timer := time.AfterFunc(o.timeout, func() { cancelStream(errTimedOut) })
	defer timer.Stop()

	stream, err := open(streamCtx, conn)
	if err != nil {
		return nil, nil, f.explain(streamCtx, err, keys)
	}
	pending := map[string]bool{}
	for _, k := range keys {
		pending[k] = true
	}
	byKey := map[string][]xdsclient.Resource{}
	var bad []error
	for len(pending) > 0 {
		key, resources, errs, err := stream.next()
		if err != nil {
			return nil, nil, f.explain(streamCtx, err, remaining(keys, pending))
		}
		if !pending[key] {
			if !slices.Contains(keys, key) && !slices.Contains(f.others, key) {
				f.others = append(f.others, key)
			}
			continue
		}
		delete(pending, key)
		byKey[key] = resources
		for _, e := range errs {
			bad = append(bad, fmt.Errorf("%s %w", key, e))
		}
	}

	// Half-close and give the source a moment to end the stream, so that it
	// reads the ACK rather than a cancelled stream.
	timer.Stop()
	if stream.CloseSend() == nil {
		drain := time.AfterFunc(drainGrace, func() { cancelStream(nil) })
		defer drain.Stop()
		for {
			if err := stream.discard(); err != nil {
				break
			}
		}
	}
	return byKey, bad, nil
}

// errTimedOut is the cancellation cause of a stream that hit --timeout.
var errTimedOut = errors.New("timed out")

// failure explains why get failed.
type failure struct {
	opts options
	conn *grpc.ClientConn
	// others are the type URLs of responses nobody asked for: a source
	// that does not echo the requested type URL looks silent otherwise.
	others []string
}

// explain turns err into a message; ctx is the stream's context and
// waiting the types that got no response.
func (f *failure) explain(ctx context.Context, err error, waiting []string) error {
	o := f.opts
	if errors.Is(context.Cause(ctx), errTimedOut) {
		if state := f.conn.GetState(); state != connectivity.Ready {
			return fmt.Errorf("could not connect to %s within %v (connection %s)", o.addr, o.timeout, state)
		}
		what := "an MCP-over-xDS source serving that type"
		if o.protocol == "mcp" {
			what = "a legacy MCP source serving that collection"
		}
		msg := fmt.Sprintf("no response from %s within %v for %s: is it %s? (a correct source answers every type, empty if it has nothing)",
			o.addr, o.timeout, strings.Join(waiting, ", "), what)
		if len(f.others) > 0 {
			msg += fmt.Sprintf("; it answered %s instead, but must echo the requested type URL", strings.Join(f.others, ", "))
		}
		return errors.New(msg)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx) // interrupted
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s closed the stream before answering %s", o.addr, strings.Join(waiting, ", "))
	}
	if o.protocol == "mcp" {
		return errors.New(explainLegacy(err, o.addr))
	}
	return errors.New(explain(err, o.addr, false))
}

func remaining(types []string, pending map[string]bool) []string {
	var out []string
	for _, t := range types {
		if pending[t] {
			out = append(out, t)
		}
	}
	return out
}
