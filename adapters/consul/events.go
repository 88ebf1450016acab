package consul

import "github.com/hashicorp/consul/api"

// event is what the goroutines of a Run send to its loop: the answer to
// one request. Each kind carries only its own fields, and apply hands it
// to its own handler, on the loop goroutine.
type event interface {
	apply(w *watch)
}

// dcGen names the generation of a datacenter a request was made for: the
// answer is ignored if the datacenter was dropped or listed again since
// (see watch.answered).
type dcGen struct {
	dc  string
	gen int
}

// signalAnswer is what one blocking query of a signal returned.
type signalAnswer struct {
	dcGen
	index uint64
	reset bool // the index went backwards: list the datacenter again
	err   error
}

// catalogEvent answers the catalog signal (/v1/catalog/services).
type catalogEvent struct {
	signalAnswer
	names    map[string][]string // service name -> tags
	filtered bool                // ACLs hid some of it
}

// checksEvent answers a checks signal, or lists every check (the baseline
// the signals are diffed against).
type checksEvent struct {
	signalAnswer
	state  string // the state listed (api.HealthAny: every check)
	checks api.HealthChecks
}

// attributionEvent is a non-blocking checks listing, read to attribute
// catalog changes (see watch.handleAttribution).
type attributionEvent struct {
	dcGen
	full   bool   // every check (else the critical ones, for the table's index)
	index  uint64 // the checks table's index
	checks api.HealthChecks
	err    error
}

// fetchEvent answers one attempt at a job: a fetch of a service's
// instances, or a probe of its index.
type fetchEvent struct {
	dcGen
	name    string
	probe   bool
	final   bool // the job is over (else a failed attempt, to be retried)
	index   uint64
	entries []*api.ServiceEntry
	err     error
	// watch is the service's watch that answered (a fetch; final does
	// not apply); nil for a job.
	watch *serviceWatch
}

// datacentersEvent lists the datacenters (Config.Datacenters "all").
type datacentersEvent struct {
	list []string
	err  error
}

func (ev catalogEvent) apply(w *watch)     { w.onCatalog(ev) }
func (ev checksEvent) apply(w *watch)      { w.onChecks(ev) }
func (ev attributionEvent) apply(w *watch) { w.onAttribution(ev) }
func (ev fetchEvent) apply(w *watch)       { w.onFetch(ev) }
func (ev datacentersEvent) apply(w *watch) { w.onDatacenters(ev) }
