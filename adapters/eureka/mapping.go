package eureka

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/model"
)

// The mapping from one Eureka application to one model.Service, rule by rule as
// docs/adapters/eureka.md lists them. It is a pure function of the application, the
// configuration and (with --eureka-max-lease-age) the time.

// serviceName is the name of an application's ServiceEntry: its name as a DNS-1123 label.
func serviceName(app string) string { return model.DNSLabel(strings.ToLower(app)) }

// effectiveStatus is the status an instance is served by. A server applies overrides before it
// serves an instance, so status is normally already right; overriddenstatus is read too
// because a server (or a replica) may list an instance whose own renewal said UP after an
// operator took it OUT_OF_SERVICE. The order is Netflix's InstanceStatusOverrideRule chain:
// an instance that says it is DOWN or STARTING is that (DownOrStartingRule), else an override
// applies (OverrideExistsRule), else its status.
func effectiveStatus(in *wire.Instance) string {
	switch in.Status {
	case wire.StatusDown, wire.StatusStarting:
		return in.Status
	}
	if o := in.OverriddenStatus; o != "" && o != wire.StatusUnknown {
		return o
	}
	return in.Status
}

// healthOf maps a status onto the model: UP receives traffic, OUT_OF_SERVICE is draining (alive,
// taken out by an operator), anything else (DOWN, STARTING, UNKNOWN) is unhealthy.
func healthOf(status string) model.Health {
	switch status {
	case wire.StatusUp:
		return model.Healthy
	case wire.StatusOutOfService:
		return model.Draining
	}
	return model.Unhealthy
}

// mapped is one application mapped: the service, or ok false when none of its instances can be
// served; and the instances skipped by the mapping, by record name.
type mapped struct {
	svc      model.Service
	ok       bool
	rejected map[string]error
}

// recordName names an instance in Rejected and logs: APP/instanceId.
func recordName(app, id string) string {
	if id == "" {
		id = "?"
	}
	return strings.ToUpper(app) + "/" + id
}

// mapApplication maps app. now is the time renewals are aged against (MaxLeaseAge).
func (r *Registry) mapApplication(app *wire.Application, now time.Time) mapped {
	out := mapped{}
	name := serviceName(app.Name)
	instances := slices.Clone(app.Instances)
	slices.SortFunc(instances, func(a, b wire.Instance) int { return cmp.Compare(a.InstanceID, b.InstanceID) })

	plain, secure := map[uint32]*portUse{}, map[uint32]*portUse{}
	var keep []kept
	for i := range instances {
		in := &instances[i]
		k, err := r.mapInstance(in, now)
		if err != nil {
			if out.rejected == nil {
				out.rejected = map[string]error{}
			}
			out.rejected[recordName(app.Name, in.InstanceID)] = err
			continue
		}
		if k.port != 0 {
			use(plain, k.port, k.proto)
		}
		if k.sport != 0 {
			use(secure, k.sport, model.ProtocolHTTPS)
		}
		if k.port == 0 && k.sport == 0 {
			continue // the decoder skips these (reason port); a guard, not a rule
		}
		keep = append(keep, k)
	}
	if len(keep) == 0 {
		return out
	}
	svc := model.Service{Namespace: r.cfg.Namespace, Name: name}
	svc.Ports, svc.Instances = servicePorts(plain, secure, keep)
	svc.Hosts = []string{r.hostOf(app, &instances[0], name)}
	out.svc, out.ok = svc, true
	return out
}

// kept is an instance mapped, with the numbers of its plain port (of protocol proto) and
// secure port, 0 for none.
type kept struct {
	inst        model.Instance
	proto       model.Protocol
	port, sport uint32
}

// mapInstance maps one instance, or says why it cannot be served (reasonProtocol).
func (r *Registry) mapInstance(in *wire.Instance, now time.Time) (kept, error) {
	proto := model.ProtocolHTTP
	if v, ok := in.Metadata[r.cfg.ProtocolKey]; ok && strings.TrimSpace(v) != "" {
		p, known := model.ParseProtocol(v)
		if !known {
			return kept{}, bad(reasonProtocol,
				fmt.Errorf("metadata %s=%q names no Istio protocol: want http, http2, grpc, https, tcp, tls, mongo, mysql, redis or udp", r.cfg.ProtocolKey, v))
		}
		proto = p
	}
	k := kept{proto: proto, inst: model.Instance{
		ID:       in.InstanceID,
		Address:  r.addressOf(in),
		Labels:   in.Metadata,
		Locality: r.localityOf(in),
		Health:   healthOf(effectiveStatus(in)),
	}}
	if r.cfg.MaxLeaseAge > 0 && k.inst.Health == model.Healthy {
		if last := in.LeaseInfo.LastRenewal(); !last.IsZero() && now.Sub(last) > r.cfg.MaxLeaseAge {
			// Self-preservation keeps an instance that stopped renewing listed as UP.
			k.inst.Health = model.Unhealthy
		}
	}
	if in.Port.Enabled && in.Port.Number != 0 {
		k.port = in.Port.Number
	}
	if in.SecurePort.Enabled && in.SecurePort.Number != 0 && in.SecurePort.Number != k.port {
		k.sport = in.SecurePort.Number
	}
	return k, nil
}

// servicePorts chooses the service's ports and maps each instance's onto them. The service's
// ports are the numbers most instances use (the smaller on a tie): what a client calls. An
// instance on another number is mapped to it (Spring Boot apps on random ports); one without
// the port at all is still listed for it (an endpoint serves every port of its ServiceEntry),
// which docs/adapters/eureka.md notes.
func servicePorts(plain, secure map[uint32]*portUse, keep []kept) ([]model.Port, []model.Instance) {
	var ports []model.Port
	svcPort, svcSecure := mostUsed(plain), mostUsed(secure)
	if svcPort != 0 && svcPort == svcSecure {
		svcSecure = 0
	}
	if svcPort != 0 {
		ports = append(ports, model.Port{Number: svcPort, Protocol: plain[svcPort].proto})
	}
	if svcSecure != 0 {
		ports = append(ports, model.Port{Number: svcSecure, Protocol: model.ProtocolHTTPS})
	}
	instances := make([]model.Instance, 0, len(keep))
	for _, k := range keep {
		var m map[uint32]uint32
		if k.port != 0 && svcPort != 0 && k.port != svcPort {
			m = map[uint32]uint32{svcPort: k.port}
		}
		if k.sport != 0 && svcSecure != 0 && k.sport != svcSecure {
			if m == nil {
				m = map[uint32]uint32{}
			}
			m[svcSecure] = k.sport
		}
		k.inst.Ports = m
		instances = append(instances, k.inst)
	}
	return model.SortedPorts(ports), instances
}

func use(m map[uint32]*portUse, n uint32, proto model.Protocol) {
	if u, ok := m[n]; ok {
		u.count++
		return
	}
	m[n] = &portUse{count: 1, proto: proto}
}

// portUse is how many instances use a port number, and the protocol of the smallest instance
// id using it.
type portUse struct {
	count int
	proto model.Protocol
}

// mostUsed is the number most instances use, the smaller on a tie; 0 for none.
func mostUsed(m map[uint32]*portUse) uint32 {
	var best uint32
	for _, n := range slices.Sorted(maps.Keys(m)) {
		if best == 0 || m[n].count > m[best].count {
			best = n
		}
	}
	return best
}

// addressOf is the instance's endpoint address by Config.Address, falling back to the other.
func (r *Registry) addressOf(in *wire.Instance) string {
	if r.cfg.Address == AddressHostName {
		return cmp.Or(in.HostName, in.IPAddr)
	}
	return cmp.Or(in.IPAddr, in.HostName)
}

// localityOf is the instance's locality, "region/zone" or "region", never a zone without a
// region (istiod's locality load balancing matches the region first; a locality "/zone" has
// an empty one, which matches no proxy).
//
//   - An Amazon dataCenterInfo's availability-zone is the zone, and the region is the one its
//     name holds (us-east-1a is in us-east-1: cloudRegion), else the metadata's region
//     (Config.RegionKey), else Config.Region.
//   - Otherwise the metadata's zone (Config.ZoneKey) is the zone, and the region is the
//     metadata's region, else the one a cloud zone name holds (us-east-1a, europe-west1-b),
//     else Config.Region.
//
// With no region the locality is "", whatever the zone (which stays a label). A region or zone
// holding '/' (the locality's separator) counts as absent.
func (r *Registry) localityOf(in *wire.Instance) string {
	part := func(s string) string {
		if s = strings.TrimSpace(s); strings.Contains(s, "/") {
			return ""
		}
		return s
	}
	meta := part(in.Metadata[r.cfg.RegionKey])
	var zone, region string
	if zone = part(in.DataCenterInfo.AvailabilityZone()); zone != "" {
		region = cmp.Or(cloudRegion(zone), meta, r.cfg.Region)
	} else {
		zone = part(in.Metadata[r.cfg.ZoneKey])
		region = cmp.Or(meta, cloudRegion(zone), r.cfg.Region)
	}
	switch {
	case region == "":
		return ""
	case zone == "":
		return region
	}
	return region + "/" + zone
}

// Cloud zone names that hold their region: Amazon's availability zones (us-east-1a,
// us-gov-west-1b, ap-southeast-2c) and Local Zones (us-west-2-lax-1a), the region being what
// comes before the zone letter or the local zone's name; Google's zones (us-central1-a,
// europe-west1-b), the region being what comes before "-<letter>". A Spring-style zone
// ("zone-a", "zone1", "primary") matches neither.
var (
	awsZone = regexp.MustCompile(`^([a-z]{2}(?:-[a-z]+)+-[0-9]+)(?:-[a-z]+-[0-9]+)?[a-z]$`)
	gcpZone = regexp.MustCompile(`^([a-z]+-[a-z]+[0-9]+)-[a-z]$`)
)

// cloudRegion is the region of a cloud zone name, "" for any other zone.
func cloudRegion(zone string) string {
	for _, re := range []*regexp.Regexp{awsZone, gcpZone} {
		if m := re.FindStringSubmatch(zone); m != nil {
			return m[1]
		}
	}
	return ""
}

// hostOf renders the host template for app, with the first instance (by id) standing for the
// application's vipAddress and metadata; an empty result falls back to "<name>.eureka".
func (r *Registry) hostOf(app *wire.Application, first *wire.Instance, name string) string {
	var b strings.Builder
	err := r.host.Execute(&b, hostData{
		Name: strings.ToLower(app.Name), App: app.Name, Namespace: r.cfg.Namespace,
		VIPAddress: first.VIPAddress, SecureVIPAddress: first.SecureVIPAddress, Metadata: first.Metadata,
	})
	if h := model.HostName(b.String()); err == nil && h != "" {
		return h
	}
	return name + ".eureka"
}
