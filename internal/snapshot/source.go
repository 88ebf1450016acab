package snapshot

// Source is what a config stream is served from: the current snapshot and a
// signal when it changes. *Store and *View are both one. It is declared
// here, once, for every server and router.
type Source interface {
	// Current returns the newest snapshot.
	Current() *Snapshot
	// Subscribe returns a channel that receives a value whenever Current
	// changes (signals coalesce), and a func that releases it.
	Subscribe() (changed <-chan struct{}, cancel func())
}

// Client is what a config stream's client says of itself in its first
// request: an xDS node's id and string metadata fields, or a legacy MCP
// SinkNode's id and annotations. A client chooses both freely. LocalPort
// is not the client's to choose: it is the port of this process the
// stream arrived on (0 when unknown), which tells shard listeners apart.
type Client struct {
	ID        string
	Labels    map[string]string
	LocalPort int
}

// Router picks the source each client is served from: the servers take one
// and know nothing of the policy behind it. name says which source it is,
// for logs ("" when there is only one).
type Router interface {
	Route(Client) (name string, src Source)
}

// Everyone returns a Router that serves every client src.
func Everyone(src Source) Router { return everyone{src} }

type everyone struct{ src Source }

func (e everyone) Route(Client) (string, Source) { return "", e.src }
