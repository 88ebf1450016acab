// Package dubbotest is a test kit for adapters of registries Dubbo registers in: the Dubbo
// interfaces and applications every such adapter must map to the same ServiceEntry names,
// hosts and ports (EquivalenceCases), as galleon-zookeeper and galleon-nacos do.
package dubbotest

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// equivalenceJSON is testdata/equivalence.json: the Dubbo interfaces and applications every
// Galleon adapter of a registry Dubbo registers in must map alike (EquivalenceCases).
//
//go:embed testdata/equivalence.json
var equivalenceJSON []byte

// Equivalence is a set of Dubbo services and the ServiceEntry each must make, whichever registry
// holds it (default Dubbo host template, Istio namespace Namespace). Adapters test their own
// mapping against it, so that moving between registries keeps names, hosts and ports.
type Equivalence struct {
	Namespace    string            `json:"namespace"`
	Interfaces   []InterfaceCase   `json:"interfaces"`
	Applications []ApplicationCase `json:"applications"`
}

// InterfaceCase is a Dubbo 2 interface and its providers.
type InterfaceCase struct {
	Case                      string `json:"case"`
	Interface, Group, Version string
	Providers                 []struct {
		IP       string `json:"ip"`
		Port     int    `json:"port"`
		Protocol string `json:"protocol"` // the URL's scheme
	} `json:"providers"`
	Want Want `json:"want"`
}

// ApplicationCase is a Dubbo 3 application and its instances.
type ApplicationCase struct {
	Case        string `json:"case"`
	Application string `json:"application"`
	Instances   []struct {
		IP        string `json:"ip"`
		Port      int    `json:"port"`
		Endpoints string `json:"endpoints"` // metadata "dubbo.endpoints"
	} `json:"instances"`
	Want Want `json:"want"`
}

// Want is the ServiceEntry a case must make: its name, host, ports and endpoint IDs (sorted).
type Want struct {
	Name  string `json:"name"`
	Host  string `json:"host"`
	Ports []struct {
		Number   uint32 `json:"number"`
		Protocol string `json:"protocol"`
		Name     string `json:"name"`
	} `json:"ports"`
	IDs []string `json:"ids"`
}

// EquivalenceCases returns the cases, decoded afresh at each call.
func EquivalenceCases() (Equivalence, error) {
	var e Equivalence
	if err := json.Unmarshal(equivalenceJSON, &e); err != nil {
		return e, fmt.Errorf("dubbotest: testdata/equivalence.json: %w", err)
	}
	return e, nil
}
