// Package subsettest holds the fixture the protocol servers' config subset
// tests share: services of two teams, and rules that give each team's sinks
// its own services.
package subsettest

import (
	"testing"

	"github.com/galleon-mesh/galleon/internal/serve/subset"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// PutTeam upserts the ServiceEntry name (body as its spec) of a service
// labelled team=<team>, and marks the store ready.
func PutTeam(t testing.TB, s *snapshot.Store, name, body, team string) {
	t.Helper()
	obj := &snapshot.Object{Kind: snapshot.ServiceEntry, Name: name, Body: []byte(body),
		Origin: &snapshot.Origin{Registry: "test", Namespace: "ns", Labels: map[string]string{"team": team}}}
	if _, _, err := s.Apply([]snapshot.Change{{Kind: snapshot.ServiceEntry, Name: name, Object: obj}}, true); err != nil {
		t.Fatal(err)
	}
}

// TeamRouter routes by two subsets: "a", for sinks stating metaKey=a (xDS
// node metadata or MCP SinkNode annotations), receives team a's services;
// "b", for node ids "sink-b-*", team b's. Other sinks receive everything.
func TeamRouter(t testing.TB, store *snapshot.Store, metaKey string) *subset.Router {
	t.Helper()
	r, err := subset.NewRouter(store, subset.Rules{Subsets: []subset.Subset{
		{Name: "a", Sinks: subset.SinkSelector{Metadata: map[string]string{metaKey: "a"}},
			Services: subset.ServiceSelector{Labels: map[string]string{"team": "a"}}},
		{Name: "b", Sinks: subset.SinkSelector{IDs: []string{"sink-b-*"}},
			Services: subset.ServiceSelector{Labels: map[string]string{"team": "b"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
