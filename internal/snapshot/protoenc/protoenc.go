// Package protoenc encodes the messages Galleon writes most often, byte for byte as
// proto.MarshalOptions{Deterministic: true} does, without reflection.
//
// Every instance of every service becomes a WorkloadEntry with two maps (labels, ports),
// and every resource an MCP Resource with two more (labels, annotations). Deterministic
// marshalling sorts each map through reflection, allocating as it goes; at 10,000 services
// of 10 instances that was a quarter of the encoding's CPU in galleon-file's start.
// The tests compare every encoder with proto.Marshal on generated messages and fail when a
// message gains a field that an encoder here does not write.
package protoenc

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	networking "istio.io/api/networking/v1alpha3"
)

// Field numbers, from istio.io/api's .proto files.
const (
	serviceEntryEndpoints = 6 // istio.networking.v1alpha3.ServiceEntry.endpoints

	workloadEntryAddress        = 1
	workloadEntryPorts          = 2
	workloadEntryLabels         = 3
	workloadEntryNetwork        = 4
	workloadEntryLocality       = 5
	workloadEntryWeight         = 6
	workloadEntryServiceAccount = 7

	mapEntryKey   = 1
	mapEntryValue = 2
)

// AppendEndpoints appends the encoding of a ServiceEntry whose only field is endpoints.
// Appended to the encoding of a ServiceEntry without endpoints, the two are the whole
// ServiceEntry (protobuf concatenates repeated fields), as proto would write it.
func AppendEndpoints(b []byte, endpoints []*networking.WorkloadEntry) []byte {
	// Grow b once: appending endpoint by endpoint copied a large service's bytes over and
	// over, each time into fresh memory.
	sizes := make([]int, len(endpoints))
	total := 0
	for i, we := range endpoints {
		sizes[i] = sizeWorkloadEntry(we)
		total += sizeMessage(serviceEntryEndpoints, sizes[i])
	}
	b = slices.Grow(b, total)
	var keys []string // scratch space for sorting map keys, shared by the endpoints
	for i, we := range endpoints {
		b = protowire.AppendTag(b, serviceEntryEndpoints, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizes[i]))
		b, keys = appendWorkloadEntry(b, we, keys)
	}
	return b
}

// AppendWorkloadEntry appends the encoding of we.
func AppendWorkloadEntry(b []byte, we *networking.WorkloadEntry) []byte {
	b, _ = appendWorkloadEntry(slices.Grow(b, sizeWorkloadEntry(we)), we, nil)
	return b
}

func appendWorkloadEntry(b []byte, we *networking.WorkloadEntry, keys []string) ([]byte, []string) {
	if we == nil {
		return b, keys
	}
	b = appendString(b, workloadEntryAddress, we.Address)
	keys = sortedKeys(we.Ports, keys)
	for _, k := range keys {
		v := we.Ports[k]
		b = protowire.AppendTag(b, workloadEntryPorts, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeUint32Entry(k, v)))
		b = protowire.AppendTag(b, mapEntryKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, mapEntryValue, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v))
	}
	b, keys = appendStringMap(b, workloadEntryLabels, we.Labels, keys)
	b = appendString(b, workloadEntryNetwork, we.Network)
	b = appendString(b, workloadEntryLocality, we.Locality)
	if we.Weight != 0 {
		b = protowire.AppendTag(b, workloadEntryWeight, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(we.Weight))
	}
	b = appendString(b, workloadEntryServiceAccount, we.ServiceAccount)
	return b, keys
}

func sizeWorkloadEntry(we *networking.WorkloadEntry) int {
	if we == nil {
		return 0
	}
	n := sizeString(workloadEntryAddress, we.Address)
	for k, v := range we.Ports {
		n += sizeMessage(workloadEntryPorts, sizeUint32Entry(k, v))
	}
	n += sizeStringMap(workloadEntryLabels, we.Labels)
	n += sizeString(workloadEntryNetwork, we.Network)
	n += sizeString(workloadEntryLocality, we.Locality)
	if we.Weight != 0 {
		n += protowire.SizeTag(workloadEntryWeight) + protowire.SizeVarint(uint64(we.Weight))
	}
	n += sizeString(workloadEntryServiceAccount, we.ServiceAccount)
	return n
}

// appendStringMap appends the entries of a map<string, string> field, in key order as
// deterministic marshalling writes them: each an entry message with its key and value, both
// written even when empty. keys is scratch space, returned for reuse.
func appendStringMap(b []byte, field protowire.Number, m map[string]string, keys []string) ([]byte, []string) {
	keys = sortedKeys(m, keys)
	for _, k := range keys {
		v := m[k]
		b = protowire.AppendTag(b, field, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeStringEntry(k, v)))
		b = protowire.AppendTag(b, mapEntryKey, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, mapEntryValue, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b, keys
}

// sizeStringMap is the size of what appendStringMap appends.
func sizeStringMap(field protowire.Number, m map[string]string) int {
	n := 0
	for k, v := range m {
		n += sizeMessage(field, sizeStringEntry(k, v))
	}
	return n
}

// appendString appends a proto3 string field, which is not written when empty.
func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func sizeString(field protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(len(s))
}

func sizeMessage(field protowire.Number, size int) int {
	return protowire.SizeTag(field) + protowire.SizeBytes(size)
}

func sizeStringEntry(k, v string) int {
	return protowire.SizeTag(mapEntryKey) + protowire.SizeBytes(len(k)) +
		protowire.SizeTag(mapEntryValue) + protowire.SizeBytes(len(v))
}

func sizeUint32Entry(k string, v uint32) int {
	return protowire.SizeTag(mapEntryKey) + protowire.SizeBytes(len(k)) +
		protowire.SizeTag(mapEntryValue) + protowire.SizeVarint(uint64(v))
}

// sortedKeys returns m's keys in order, in keys' array when it is large enough.
func sortedKeys[V any](m map[string]V, keys []string) []string {
	keys = keys[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
