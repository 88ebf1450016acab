package wire

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Eureka's instance statuses (Netflix's InstanceInfo.InstanceStatus). Only UP instances take
// traffic; Polaris serves only UP, DOWN and OUT_OF_SERVICE (it turns every other registered
// status into OUT_OF_SERVICE).
const (
	StatusUp           = "UP"
	StatusDown         = "DOWN"
	StatusStarting     = "STARTING"
	StatusOutOfService = "OUT_OF_SERVICE"
	StatusUnknown      = "UNKNOWN"
)

// Eureka's delta actions (Netflix's InstanceInfo.ActionType). A full listing carries them too
// (Netflix's as stored, Polaris's always ADDED); only a delta's mean anything.
const (
	ActionAdded    = "ADDED"
	ActionModified = "MODIFIED"
	ActionDeleted  = "DELETED"
)

// DefaultMaxBody bounds a listing when Decode is given no limit: room for about twice the
// listing of a large registry of Spring Cloud instances, in JSON or XML (their sizes: see
// docs/adapters/eureka.md, BenchmarkDecodeJSON2000x10 and BenchmarkDecodeXML2000x10), that still
// stops a runaway answer before it costs the adapter its memory.
const DefaultMaxBody = 64 << 20

// DefaultMaxInstances and DefaultMaxApps bound what one listing may list, counted as it is
// decoded: the bytes of a listing do not bound the memory it takes, its records do. A minimal
// instance (an id, a status, a port) is a small fraction of the size of a Spring Cloud one, so
// DefaultMaxBody alone would let over a million through, each taking several times its size
// once decoded, and a ServiceEntry endpoint after that (see docs/adapters/eureka.md, "Limits",
// and TestDecodeMemoryPerInstance). These bounds are about twice what a listing of real
// instances within DefaultMaxBody can hold, and several times the largest registries Netflix
// describes running.
const (
	DefaultMaxInstances = 100_000
	DefaultMaxApps      = 20_000
)

// ErrTooLarge is returned (wrapped, as a *LimitError) by Decode for a listing over one of its
// limits.
var ErrTooLarge = errors.New("eureka: listing too large")

// Limits bound one listing. A zero field is its default; DecodeBytes applies none.
type Limits struct {
	// MaxBody is in bytes, after decompression (DefaultMaxBody).
	MaxBody int64
	// MaxApps counts the applications listed, MaxInstances the instances, servable or not
	// (DefaultMaxApps, DefaultMaxInstances).
	MaxApps, MaxInstances int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	if l.MaxApps <= 0 {
		l.MaxApps = DefaultMaxApps
	}
	if l.MaxInstances <= 0 {
		l.MaxInstances = DefaultMaxInstances
	}
	return l
}

// What a LimitError is about.
const (
	LimitBytes        = "bytes"
	LimitApplications = "applications"
	LimitInstances    = "instances"
)

// LimitError is a listing over one of its Limits. The decoder stops at the first record (or
// byte) over the limit: a listing over it is never held whole.
type LimitError struct {
	What  string // LimitBytes, LimitApplications or LimitInstances
	Limit int64
}

func (e *LimitError) Error() string {
	if e.What == LimitBytes {
		return fmt.Sprintf("%v: over %d bytes", ErrTooLarge, e.Limit)
	}
	return fmt.Sprintf("%v: more than %d %s", ErrTooLarge, e.Limit, e.What)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// Applications is one decoded /apps or /apps/delta listing, or the local registry the adapter
// keeps (ApplyDelta). Treat it as immutable: ApplyDelta shares unchanged Applications and
// Instances (and their maps) between the old state and the new.
type Applications struct {
	// VersionsDelta is versions__delta, the server's registry version; -1 when absent (the
	// value Netflix's client starts from) or not a number.
	VersionsDelta int64
	// AppsHashcode is apps__hashcode as the server sent it: its registry's status counts by
	// Eureka's rule (Hashcode). In a delta it describes the server's whole registry, not the
	// delta.
	AppsHashcode string
	// Apps are the applications with at least one servable instance, in the order listed.
	Apps []Application
	// Skipped are the instances the server listed that cannot be served, each with the reason.
	// They stay part of the registry for Hashcode (the server counted them) and for deltas
	// (a later MODIFIED can make one servable, a DELETED removes it).
	Skipped []Skipped
	// Duplicates counts instances dropped because a later one in the same listing had the same
	// application and id (the later one is kept, as Netflix's Application.addInstance does).
	Duplicates int
}

// Servable is the number of servable instances, those of Apps.
func (a *Applications) Servable() int {
	n := 0
	for _, app := range a.Apps {
		n += len(app.Instances)
	}
	return n
}

// Clone is a copy of a that shares no slice with it (instances' maps are shared: nothing
// here writes to them).
func (a *Applications) Clone() *Applications {
	out := *a
	out.Apps = slices.Clone(a.Apps)
	for i := range out.Apps {
		out.Apps[i].Instances = slices.Clone(out.Apps[i].Instances)
	}
	out.Skipped = slices.Clone(a.Skipped)
	return &out
}

// Find returns the servable instance app/id (app in any case), or nil.
func (a *Applications) Find(app, id string) *Instance {
	for i := range a.Apps {
		if strings.EqualFold(a.Apps[i].Name, app) {
			for j := range a.Apps[i].Instances {
				if a.Apps[i].Instances[j].InstanceID == id {
					return &a.Apps[i].Instances[j]
				}
			}
		}
	}
	return nil
}

// Application is one Eureka application (a service) and its servable instances.
type Application struct {
	// Name is the application's name as listed. Eureka servers upper-case it; lookups here
	// compare it case-insensitively, like Netflix's client (toUpperCase(Locale.ROOT)).
	Name      string
	Instances []Instance
}

// Instance is one registered instance (Netflix's InstanceInfo), as far as the adapter reads it.
type Instance struct {
	// InstanceID identifies the instance within its application. When the listing has no
	// instanceId (clients before Eureka 1.1.153 sent none) it is what Netflix's
	// InstanceInfo.getId falls back to: an Amazon dataCenterInfo's instance-id, else hostName.
	InstanceID string
	// App is the application's name as listed (the application element's name; the instance's
	// own app field only when the application has none).
	App      string
	IPAddr   string
	HostName string
	// Port is the non-secure port, SecurePort the secure one.
	Port, SecurePort Port
	VIPAddress       string
	SecureVIPAddress string
	// Status is the status as served, upper case: one of the Status* constants. A server
	// applies status overrides to it before serving.
	Status string
	// OverriddenStatus is overriddenstatus (or overriddenStatus), upper case; UNKNOWN when
	// absent or not a status, as Netflix's InstanceStatus.toEnum reads it.
	OverriddenStatus string
	// Metadata is the instance's metadata map, without the "@class" marker Netflix's codecs add
	// to an empty map; nil when empty.
	Metadata       map[string]string
	DataCenterInfo DataCenterInfo
	LeaseInfo      LeaseInfo
	// LastUpdatedTimestamp and LastDirtyTimestamp are milliseconds since the epoch, 0 when
	// absent, null or not a number (Jackson's asLong reads those as 0 too).
	LastUpdatedTimestamp int64
	LastDirtyTimestamp   int64
	// ActionType is ADDED, MODIFIED or DELETED in a delta, as listed (upper case).
	ActionType string
}

// Port is a port and whether it is enabled (Eureka lists disabled ports too, often as 0 or
// 443).
type Port struct {
	Number  uint32
	Enabled bool
}

// DataCenterInfo says where the instance runs. Name is "MyOwn" or "Amazon" (Netflix's
// DataCenterInfo.Name; Spring Cloud also sends "Netflix"); Class is the Java class Netflix's
// codecs name it by; Metadata is Amazon's (availability-zone, instance-id, local-ipv4, ...).
type DataCenterInfo struct {
	Name     string
	Class    string
	Metadata map[string]string
}

// AvailabilityZone is the Amazon availability-zone, or "".
func (d DataCenterInfo) AvailabilityZone() string { return d.Metadata["availability-zone"] }

// LeaseInfo is the instance's lease: how often it renews and how long the server waits for a
// renewal before it evicts it. Timestamps are milliseconds since the epoch; 0 is unknown
// (Polaris always lists 0).
type LeaseInfo struct {
	RenewalIntervalInSecs int64
	DurationInSecs        int64
	RegistrationTimestamp int64
	LastRenewalTimestamp  int64
	EvictionTimestamp     int64
	ServiceUpTimestamp    int64
}

// LastRenewal is LastRenewalTimestamp as a time; the zero time when unknown.
func (l LeaseInfo) LastRenewal() time.Time {
	if l.LastRenewalTimestamp <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(l.LastRenewalTimestamp)
}

// Skipped is an instance the server listed that cannot be served.
type Skipped struct {
	// App and InstanceID identify it as far as the listing did (either may be empty when that
	// is the reason).
	App, InstanceID string
	// Status is its status as served (upper case), what Hashcode counts it under.
	Status string
	// ActionType is its delta action as listed.
	ActionType string
	// Reason is what it is counted under: id, address, port, status (or, from ApplyDelta,
	// action); Err says exactly what is wrong.
	Reason string
	Err    error
}

func (s Skipped) keyed() bool { return s.App != "" && s.InstanceID != "" }

// Format is a listing's encoding.
type Format int

// Formats.
const (
	FormatJSON Format = iota + 1
	FormatXML
)

func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatXML:
		return "xml"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// MediaType is the Accept header that asks a Eureka server for f.
func (f Format) MediaType() string {
	if f == FormatXML {
		return "application/xml"
	}
	return "application/json"
}

// FormatOf says how body is encoded: by its Content-Type if that names JSON or XML, else by its
// first character ('<' is XML). A Eureka server answers XML when asked for nothing, so a client
// that gets an unlabelled answer must look.
func FormatOf(contentType string, body []byte) Format {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			return FormatJSON
		case mt == "application/xml" || mt == "text/xml" || strings.HasSuffix(mt, "+xml"):
			return FormatXML
		}
	}
	if b := trimBOM(body); len(b) > 0 && b[0] == '<' {
		return FormatXML
	}
	return FormatJSON
}

// Decode reads one listing (the body of GET /apps or /apps/delta) of at most limit bytes
// (DefaultMaxBody if limit <= 0) and the default instance and application counts; see
// DecodeLimits.
func Decode(r io.Reader, contentType string, limit int64) (*Applications, error) {
	return DecodeLimits(r, contentType, Limits{MaxBody: limit})
}

// DecodeLimits reads one listing within lim and decodes it as FormatOf(contentType) says,
// streaming: the body is never held whole, only the instance being decoded and what was decoded
// before it. A listing over a limit is a *LimitError (ErrTooLarge), found at the first byte,
// application or instance over it; a body that is not a listing (bad syntax, no <applications>
// or "applications" root) is an error; an instance that cannot be served is skipped (see
// Skipped) and the rest decodes.
func DecodeLimits(r io.Reader, contentType string, lim Limits) (*Applications, error) {
	lim = lim.withDefaults()
	br := bufio.NewReaderSize(&limitReader{r: r, left: lim.MaxBody, limit: lim.MaxBody}, 64<<10)
	// Skip white space and a byte order mark, then look at the first character.
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("eureka: reading the listing: %w", err)
		}
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			_ = br.UnreadByte()
			break
		}
	}
	if bom, _ := br.Peek(3); string(bom) == "\xef\xbb\xbf" {
		_, _ = br.Discard(3)
	}
	first, err := br.Peek(1)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("eureka: reading the listing: %w", err)
	}
	switch f := FormatOf(contentType, first); f {
	case FormatJSON:
		return decodeJSON(br, lim)
	case FormatXML:
		return decodeXML(br, lim)
	default:
		return nil, fmt.Errorf("eureka: unknown format %v", f)
	}
}

// DecodeBytes decodes one listing in the given format (see Decode); it has no limit.
func DecodeBytes(body []byte, f Format) (*Applications, error) {
	body = trimBOM(body)
	switch f {
	case FormatJSON:
		return decodeJSON(bytes.NewReader(body), Limits{})
	case FormatXML:
		return decodeXML(bytes.NewReader(body), Limits{})
	}
	return nil, fmt.Errorf("eureka: unknown format %v", f)
}

// limitReader reads at most left bytes of r, and fails with a *LimitError if r has more.
type limitReader struct {
	r           io.Reader
	left, limit int64
	over        bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.over {
		return 0, &LimitError{What: LimitBytes, Limit: l.limit}
	}
	// Ask for one byte more than is left: getting it means the body is over the limit.
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		l.over = true
		return int(l.left), &LimitError{What: LimitBytes, Limit: l.limit}
	}
	l.left -= int64(n)
	return n, err
}

func trimBOM(b []byte) []byte {
	return bytes.TrimPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("\xef\xbb\xbf"))
}

// assembler builds a listing from the applications a decoder reads, one application at a time
// (JSON and XML alike, so that both are validated by the same code, and so that only one
// application's raw instances are held at once): servable instances by application, the others
// in Skipped; of several with the same application and id the last is kept.
type assembler struct {
	lim Limits // zero fields: no limit
	// nApps and nInstances count what was listed, against lim.
	nApps, nInstances int
	out               Applications
	apps              map[string]int           // upper-case name → index in out.Apps
	where             map[instanceKey]position // where each instance with an id is
	dead              map[position]bool        // instances replaced by a later one with the same id
}

// position is an instance's place in the listing: out.Apps[app].Instances[idx], or
// out.Skipped[idx] when app is -1.
type position struct{ app, idx int }

func newAssembler(lim Limits) *assembler {
	return &assembler{lim: lim, out: Applications{VersionsDelta: -1}, apps: map[string]int{}, where: map[instanceKey]position{}}
}

// countApp counts one more application listed, and fails once they are over the limit.
func (as *assembler) countApp() error {
	as.nApps++
	if as.lim.MaxApps > 0 && as.nApps > as.lim.MaxApps {
		return &LimitError{What: LimitApplications, Limit: int64(as.lim.MaxApps)}
	}
	return nil
}

// countInstance counts one more instance listed, and fails once they are over the limit.
func (as *assembler) countInstance() error {
	as.nInstances++
	if as.lim.MaxInstances > 0 && as.nInstances > as.lim.MaxInstances {
		return &LimitError{What: LimitInstances, Limit: int64(as.lim.MaxInstances)}
	}
	return nil
}

func (as *assembler) versionsDelta(v scalar) {
	if n, err := strconv.ParseInt(v.text(), 10, 64); err == nil {
		as.out.VersionsDelta = n
	}
}

func (as *assembler) appsHashcode(v scalar) { as.out.AppsHashcode = v.text() }

// notObject records an application that is not an object (JSON).
func (as *assembler) notObject() {
	as.out.Skipped = append(as.out.Skipped, Skipped{Reason: ReasonOther, Err: bad(ReasonOther, errors.New("an application that is not an object"))})
}

// add validates instances of one application and adds them.
func (as *assembler) add(appName string, raws []rawInstance) {
	for i := range raws {
		as.addOne(appName, &raws[i])
	}
}

// addOne validates one instance and adds it.
func (as *assembler) addOne(appName string, r *rawInstance) {
	in, err := build(appName, r)
	key := keyOf(in.App, in.InstanceID)
	keyed := key.app != "" && key.id != ""
	if keyed {
		if p, dup := as.where[key]; dup {
			as.out.Duplicates++
			if as.dead == nil {
				as.dead = map[position]bool{}
			}
			as.dead[p] = true
		}
	}
	var p position
	if err != nil {
		p = position{-1, len(as.out.Skipped)}
		as.out.Skipped = append(as.out.Skipped, Skipped{App: in.App, InstanceID: in.InstanceID, Status: in.Status,
			ActionType: in.ActionType, Reason: reasonOf(err), Err: err})
	} else {
		j, ok := as.apps[key.app]
		if !ok {
			j = len(as.out.Apps)
			as.apps[key.app] = j
			as.out.Apps = append(as.out.Apps, Application{Name: in.App})
		}
		p = position{j, len(as.out.Apps[j].Instances)}
		as.out.Apps[j].Instances = append(as.out.Apps[j].Instances, in)
	}
	if keyed {
		as.where[key] = p
	}
}

// finish drops the instances later ones replaced, and the applications left without any.
func (as *assembler) finish() *Applications {
	out := &as.out
	if len(as.dead) == 0 {
		return out
	}
	apps := out.Apps[:0]
	for j, app := range out.Apps {
		kept := app.Instances[:0]
		for i, in := range app.Instances {
			if !as.dead[position{j, i}] {
				kept = append(kept, in)
			}
		}
		if len(kept) > 0 {
			apps = append(apps, Application{Name: app.Name, Instances: kept})
		}
	}
	out.Apps = apps
	skipped := out.Skipped[:0]
	for i, s := range out.Skipped {
		if !as.dead[position{-1, i}] {
			skipped = append(skipped, s)
		}
	}
	out.Skipped = skipped
	return out
}

// scalar is one value that Eureka servers write as a string ("8080", "true"), a number, a
// boolean or null, depending on the server and codec: Netflix's Jackson codec writes port
// numbers as numbers and flags and timestamps as strings, its older XStream JSON writes every
// value as a string, Polaris writes @enabled as a boolean and some timestamps as null. It keeps
// the text; the field's reader parses it. set is false for null or absent.
type scalar struct {
	s   string
	set bool
	bad bool // a JSON object or array where a value belongs
}

func str(s string) scalar { return scalar{s: s, set: s != ""} }

// text is the value trimmed, "" for null or absent or not a value.
func (v scalar) text() string { return strings.TrimSpace(v.s) }

// int64OrZero reads a timestamp or duration the way Jackson's asLong does: anything that is not
// a number is 0 (unknown).
func (v scalar) int64OrZero() int64 {
	n, err := strconv.ParseInt(v.text(), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// rawInstance is one instance as the wire gives it. Its JSON names are Netflix's (and
// Polaris's); XML fills it through xmlInstance.
type rawInstance struct {
	InstanceID       scalar `json:"instanceId"`
	App              scalar `json:"app"`
	IPAddr           scalar `json:"ipAddr"`
	HostName         scalar `json:"hostName"`
	Status           scalar `json:"status"`
	OverriddenStatus scalar `json:"overriddenStatus"`
	// Netflix's XStream codecs and older versions of its Jackson codec spell it
	// overriddenstatus; Netflix's readers take both.
	OverriddenStatusLegacy scalar        `json:"overriddenstatus"`
	Port                   rawPort       `json:"port"`
	SecurePort             rawPort       `json:"securePort"`
	VIPAddress             scalar        `json:"vipAddress"`
	SecureVIPAddress       scalar        `json:"secureVipAddress"`
	Metadata               stringMap     `json:"metadata"`
	DataCenterInfo         rawDataCenter `json:"dataCenterInfo"`
	LeaseInfo              rawLease      `json:"leaseInfo"`
	LastUpdatedTimestamp   scalar        `json:"lastUpdatedTimestamp"`
	LastDirtyTimestamp     scalar        `json:"lastDirtyTimestamp"`
	ActionType             scalar        `json:"actionType"`
	notObject              bool          // JSON: an instance that is not an object
}

// rawPort is {"$": 8080, "@enabled": "true"} in JSON, <port enabled="true">8080</port> in XML.
type rawPort struct {
	Number  scalar `json:"$"`
	Enabled scalar `json:"@enabled"`
	set     bool
	bad     bool
}

// stringMap is a metadata map: values of any JSON type are read as text, as Jackson's asText
// reads them (an object or array value is ""), and Netflix's "@class" marker is dropped.
type stringMap map[string]string

// classKey is the "@class" entry Netflix's codecs write into an empty metadata map
// ("java.util.Collections$EmptyMap", for XStream's sake) and Polaris copies into every listing
// of an instance registered with it.
const classKey = "@class"

type rawDataCenter struct {
	Class    scalar    `json:"@class"`
	Name     scalar    `json:"name"`
	Metadata stringMap `json:"metadata"`
}

type rawLease struct {
	RenewalIntervalInSecs scalar `json:"renewalIntervalInSecs"`
	DurationInSecs        scalar `json:"durationInSecs"`
	RegistrationTimestamp scalar `json:"registrationTimestamp"`
	LastRenewalTimestamp  scalar `json:"lastRenewalTimestamp"`
	EvictionTimestamp     scalar `json:"evictionTimestamp"`
	ServiceUpTimestamp    scalar `json:"serviceUpTimestamp"`
}

// instanceKey identifies an instance in a registry: its application (upper case) and id.
type instanceKey struct{ app, id string }

func keyOf(app, id string) instanceKey { return instanceKey{strings.ToUpper(app), id} }

// build validates one instance. It returns the instance as far as it could read it even when it
// returns an error (a reason by bad), so that the Skipped entry names it.
func build(appName string, r *rawInstance) (Instance, error) {
	in := Instance{
		App:                  cmp.Or(appName, r.App.text()),
		IPAddr:               r.IPAddr.text(),
		HostName:             r.HostName.text(),
		VIPAddress:           r.VIPAddress.text(),
		SecureVIPAddress:     r.SecureVIPAddress.text(),
		Status:               strings.ToUpper(r.Status.text()),
		OverriddenStatus:     StatusUnknown,
		Metadata:             r.Metadata,
		LastUpdatedTimestamp: r.LastUpdatedTimestamp.int64OrZero(),
		LastDirtyTimestamp:   r.LastDirtyTimestamp.int64OrZero(),
		ActionType:           strings.ToUpper(r.ActionType.text()),
		DataCenterInfo: DataCenterInfo{
			Name:     r.DataCenterInfo.Name.text(),
			Class:    r.DataCenterInfo.Class.text(),
			Metadata: r.DataCenterInfo.Metadata,
		},
		LeaseInfo: LeaseInfo{
			RenewalIntervalInSecs: r.LeaseInfo.RenewalIntervalInSecs.int64OrZero(),
			DurationInSecs:        r.LeaseInfo.DurationInSecs.int64OrZero(),
			RegistrationTimestamp: r.LeaseInfo.RegistrationTimestamp.int64OrZero(),
			LastRenewalTimestamp:  r.LeaseInfo.LastRenewalTimestamp.int64OrZero(),
			EvictionTimestamp:     r.LeaseInfo.EvictionTimestamp.int64OrZero(),
			ServiceUpTimestamp:    r.LeaseInfo.ServiceUpTimestamp.int64OrZero(),
		},
	}
	if r.notObject {
		return in, bad(ReasonOther, errors.New("an instance that is not an object"))
	}
	// Identity, as Netflix's InstanceInfo.getId: instanceId, else an Amazon instance's
	// instance-id, else hostName.
	in.InstanceID = r.InstanceID.text()
	if in.InstanceID == "" && strings.EqualFold(in.DataCenterInfo.Name, "Amazon") {
		in.InstanceID = strings.TrimSpace(in.DataCenterInfo.Metadata["instance-id"])
	}
	if in.InstanceID == "" && !r.HostName.bad {
		in.InstanceID = in.HostName
	}
	if st := cmp.Or(r.OverriddenStatus, r.OverriddenStatusLegacy); knownStatus(strings.ToUpper(st.text())) {
		in.OverriddenStatus = strings.ToUpper(st.text())
	}
	switch {
	case in.App == "":
		return in, bad(ReasonID, errors.New("no application name"))
	case r.InstanceID.bad || in.InstanceID == "":
		return in, bad(ReasonID, errors.New("no instanceId (nor hostName to stand for it)"))
	case r.Status.bad || !knownStatus(in.Status):
		return in, bad(ReasonStatus, fmt.Errorf("status %q is none of UP, DOWN, STARTING, OUT_OF_SERVICE, UNKNOWN", in.Status))
	}
	if err := checkAddress(r, in.IPAddr, in.HostName); err != nil {
		return in, err
	}
	var err error
	// Netflix's XStream reader enables the port unless enabled="false" and the secure port only
	// if enabled="true"; both formats get those defaults when the flag is missing.
	if in.Port, err = readPort("port", r.Port, true); err != nil {
		return in, err
	}
	if in.SecurePort, err = readPort("securePort", r.SecurePort, false); err != nil {
		return in, err
	}
	if !in.Port.Enabled && !in.SecurePort.Enabled {
		return in, bad(ReasonPort, errors.New("neither port nor securePort is enabled"))
	}
	return in, nil
}

func knownStatus(s string) bool {
	switch s {
	case StatusUp, StatusDown, StatusStarting, StatusOutOfService, StatusUnknown:
		return true
	}
	return false
}

// hostNameRE is what a hostName may look like: letters, digits, '-', '.', and '_' (Windows
// hosts have them), as Eureka clients report their host's name. Anything else (spaces, '/',
// a URL) is not an address.
var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$`)

// checkAddress wants at least one of ipAddr and hostName, and every one given well-formed: the
// adapter picks one of them by configuration, and a listing that gets either wrong is not to be
// trusted with the other.
func checkAddress(r *rawInstance, ip, host string) error {
	if r.IPAddr.bad || r.HostName.bad {
		return bad(ReasonAddress, errors.New("ipAddr or hostName is not a value"))
	}
	if ip == "" && host == "" {
		return bad(ReasonAddress, errors.New("no ipAddr and no hostName"))
	}
	if ip != "" {
		if _, err := netip.ParseAddr(ip); err != nil {
			return bad(ReasonAddress, fmt.Errorf("ipAddr %q is not an IP address", ip))
		}
	}
	if host != "" && len(host) <= 253 && hostNameRE.MatchString(host) {
		return nil
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return bad(ReasonAddress, fmt.Errorf("hostName %q is not a host name or IP address", host))
		}
	}
	return nil
}

// readPort reads a port; a disabled port's number is not checked (Eureka lists 0, 443 or 7002
// for ports nobody listens on), an enabled one must be 1-65535.
func readPort(name string, p rawPort, defEnabled bool) (Port, error) {
	if p.bad || p.Number.bad || p.Enabled.bad {
		return Port{}, bad(ReasonPort, fmt.Errorf("%s is not a port", name))
	}
	if !p.set {
		return Port{}, nil // no such port
	}
	out := Port{Enabled: defEnabled}
	if p.Enabled.set {
		switch strings.ToLower(p.Enabled.text()) {
		case "true":
			out.Enabled = true
		case "false":
			out.Enabled = false
		default:
			return Port{}, bad(ReasonPort, fmt.Errorf("%s enabled=%q is neither true nor false", name, p.Enabled.s))
		}
	}
	n, err := strconv.ParseUint(p.Number.text(), 10, 32)
	switch {
	case !out.Enabled:
		if err == nil && n <= 65535 {
			out.Number = uint32(n)
		}
	case err != nil:
		return Port{}, bad(ReasonPort, fmt.Errorf("%s %q is not a number", name, p.Number.s))
	case n < 1 || n > 65535:
		return Port{}, bad(ReasonPort, fmt.Errorf("%s %d is out of 1-65535", name, n))
	default:
		out.Number = uint32(n)
	}
	return out, nil
}

// equal says whether two instances are the same registration: every field but ActionType (a
// delta's MODIFIED and a listing's ADDED of the same instance are equal).
func (in *Instance) equal(o *Instance) bool {
	return in.InstanceID == o.InstanceID && in.App == o.App && in.IPAddr == o.IPAddr && in.HostName == o.HostName &&
		in.Port == o.Port && in.SecurePort == o.SecurePort &&
		in.VIPAddress == o.VIPAddress && in.SecureVIPAddress == o.SecureVIPAddress &&
		in.Status == o.Status && in.OverriddenStatus == o.OverriddenStatus &&
		maps.Equal(in.Metadata, o.Metadata) &&
		in.DataCenterInfo.Name == o.DataCenterInfo.Name && in.DataCenterInfo.Class == o.DataCenterInfo.Class &&
		maps.Equal(in.DataCenterInfo.Metadata, o.DataCenterInfo.Metadata) &&
		in.LeaseInfo == o.LeaseInfo &&
		in.LastUpdatedTimestamp == o.LastUpdatedTimestamp && in.LastDirtyTimestamp == o.LastDirtyTimestamp
}

// CountingReader counts the bytes read through it: what a listing cost, on the wire and
// decoded.
type CountingReader struct {
	R io.Reader
	N int64
}

func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}
