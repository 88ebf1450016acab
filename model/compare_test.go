package model

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func sample() Service {
	return Service{
		Namespace: "ns", Name: "web",
		Hosts: []string{"web.test", "www.test"}, Addresses: []string{"10.1.0.0/16"},
		Ports:  []Port{{Number: 80, Protocol: ProtocolHTTP}, {Number: 443, Protocol: ProtocolHTTPS, Name: "https"}},
		Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"}, ExportTo: []string{"."},
		Instances: []Instance{
			{ID: "i1", Address: "10.0.0.1", Ports: map[uint32]uint32{80: 8080}, Labels: map[string]string{"v": "1"}, Weight: 2},
			{ID: "i2", Address: "10.0.0.2", Health: Unhealthy},
		},
	}
}

// TestCloneSharesNothing changes every list and map of a clone and checks
// that the original did not change.
func TestCloneSharesNothing(t *testing.T) {
	orig := sample()
	keep := sample()
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone differs: %+v", c)
	}
	c.Hosts[0], c.Addresses[0], c.ExportTo[0] = "x", "x", "x"
	c.Ports[0].Number = 1
	c.Labels["team"], c.Annotations["note"] = "b", "y"
	c.Instances[0].Address = "x"
	c.Instances[0].Ports[80] = 1
	c.Instances[0].Labels["v"] = "2"
	if !reflect.DeepEqual(orig, keep) {
		t.Fatalf("changing the clone changed the original: %+v", orig)
	}
	var empty Service
	empty.Hosts, empty.Labels = []string{}, map[string]string{}
	if c := empty.Clone(); c.Hosts == nil || c.Labels == nil || c.Addresses != nil || c.Instances != nil {
		t.Fatalf("Clone must keep nil and empty apart: %#v", c)
	}
}

func TestEqualByMeaning(t *testing.T) {
	base := sample()
	same := []func(*Service){
		func(s *Service) { s.Hosts = []string{"www.test", "web.test"} },
		func(s *Service) { s.Ports[0], s.Ports[1] = s.Ports[1], s.Ports[0] },
		func(s *Service) { s.Instances[0], s.Instances[1] = s.Instances[1], s.Instances[0] },
		func(s *Service) { s.Ports[0].Protocol = "http" },
		func(s *Service) { s.Ports[0].Name = "http-80" },
		func(s *Service) { s.Instances[1].Ports = map[uint32]uint32{443: 443} },
		func(s *Service) { s.Instances[1].Labels = map[string]string{} },
	}
	for i, change := range same {
		s := base.Clone()
		change(&s)
		if !Equal(base, s) || !Equal(s, base) {
			t.Errorf("change %d: want equal by meaning:\n%+v\n%+v", i, base, s)
		}
	}
	differ := []func(*Service){
		func(s *Service) { s.Hosts = append(s.Hosts, "w3.test") },
		func(s *Service) { s.Ports[0].Number = 81 },
		func(s *Service) { s.Labels["team"] = "b" },
		func(s *Service) { s.Location = MeshExternal },
		func(s *Service) { s.Instances[0].Weight = 3 },
		func(s *Service) { s.Instances[0].Ports[80] = 8081 },
		func(s *Service) { s.Instances[1].Health = Healthy },
		func(s *Service) { s.Instances = s.Instances[:1] },
		func(s *Service) { s.Instances[1].ID = "i3" },
	}
	for i, change := range differ {
		s := base.Clone()
		change(&s)
		if Equal(base, s) || Equal(s, base) {
			t.Errorf("change %d: want different:\n%+v\n%+v", i, base, s)
		}
	}
}

// TestEqualAgreesWithCanonical: on random services and random changes,
// Equal says what reflect.DeepEqual of the canonical forms says, whichever
// of its two paths answers.
func TestEqualAgreesWithCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) string { return strconv.Itoa(rng.IntN(n)) }
	random := func() Service {
		s := Service{Namespace: "ns", Name: "s" + pick(2)}
		for range rng.IntN(3) {
			s.Hosts = append(s.Hosts, "h"+pick(3)+".test")
		}
		for range rng.IntN(3) {
			s.Ports = append(s.Ports, Port{Number: uint32(80 + rng.IntN(3)), Protocol: []Protocol{"", ProtocolTCP, "tcp", ProtocolHTTP}[rng.IntN(4)]})
		}
		if rng.IntN(2) == 0 {
			s.Labels = map[string]string{"k": pick(2)}
		}
		for i := range rng.IntN(4) {
			inst := Instance{ID: "i" + strconv.Itoa(i), Address: "10.0.0." + pick(2), Weight: uint32(rng.IntN(2))}
			if rng.IntN(2) == 0 {
				inst.Ports = map[uint32]uint32{80: uint32(80 + rng.IntN(2))}
			}
			s.Instances = append(s.Instances, inst)
		}
		rng.Shuffle(len(s.Instances), func(i, j int) { s.Instances[i], s.Instances[j] = s.Instances[j], s.Instances[i] })
		return s
	}
	equal, differ := 0, 0
	for range 20000 {
		a, b := random(), random()
		if rng.IntN(2) == 0 { // b: a reordered, sometimes with one thing changed
			b = a.Clone()
			rng.Shuffle(len(b.Hosts), func(i, j int) { b.Hosts[i], b.Hosts[j] = b.Hosts[j], b.Hosts[i] })
			rng.Shuffle(len(b.Ports), func(i, j int) { b.Ports[i], b.Ports[j] = b.Ports[j], b.Ports[i] })
			rng.Shuffle(len(b.Instances), func(i, j int) { b.Instances[i], b.Instances[j] = b.Instances[j], b.Instances[i] })
			if rng.IntN(3) == 0 && len(b.Instances) > 0 {
				b.Instances[0].Weight++
			}
		}
		want := reflect.DeepEqual(Canonical(a), Canonical(b))
		if got := Equal(a, b); got != want {
			t.Fatalf("Equal = %v, canonical forms equal = %v:\n%+v\n%+v", got, want, a, b)
		}
		if want {
			equal++
		} else {
			differ++
		}
	}
	if equal < 100 || differ < 100 {
		t.Fatalf("the generator made %d equal and %d different pairs: too few of one kind to test anything", equal, differ)
	}
}

func TestCheckNamespace(t *testing.T) {
	if err := CheckNamespace("shop-1"); err != nil {
		t.Errorf("shop-1: %v", err)
	}
	for ns, want := range map[string]string{"Shop_1": `e.g. "shop-1"`, "": "not a DNS-1123 label", "!!": "not a DNS-1123 label"} {
		if err := CheckNamespace(ns); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckNamespace(%q) = %v, want an error containing %q", ns, err, want)
		}
	}
}
