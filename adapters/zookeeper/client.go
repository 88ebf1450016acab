package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// errClosing is what the dialer answers once Run is ending.
var errClosing = errors.New("zookeeper: the adapter is stopping")

// connect creates the client, which then connects in the background, and returns its event
// channel. It tries again every retryInterval while no server name resolves, reporting the
// registry unreachable, until ctx is done.
func (w *watcher) connect(ctx context.Context) (<-chan zk.Event, error) {
	cfg := &w.r.cfg
	w.hosts = &hostProvider{quit: make(chan struct{})}
	dial := w.dialer()
	for {
		conn, events, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
			zk.WithEventCallback(w.push),
			zk.WithLogger(zkLogger{w.r.log}),
			zk.WithLogInfo(false),
			zk.WithMaxBufferSize(cfg.MaxBuffer),
			zk.WithDialer(dial),
			zk.WithHostProvider(w.hosts))
		if err == nil {
			w.conn = conn
			return events, nil
		}
		// Only a server name that does not resolve fails here: the client connects in
		// the background.
		w.rec.Unreachable(fmt.Errorf("zookeeper %s: %w", strings.Join(cfg.Servers, ","), err))
		w.down = true
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retryInterval):
		}
	}
}

// dialer is the client's dialer: Config's, through a frameConn (watch_conn.go), and none once
// Run is ending.
func (w *watcher) dialer() zk.Dialer {
	cfg := &w.r.cfg
	baseDial := cfg.dialer()
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		w.mu.Lock()
		closing := w.closing
		w.mu.Unlock()
		if closing {
			return nil, errClosing // the client is closing: connect nothing more
		}
		conn, err := baseDial(network, address, timeout)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.dialErr = err
		if err != nil {
			return nil, err
		}
		if w.closing {
			conn.Close() // closed while dialling: closeAll has run already
			return nil, errClosing
		}
		w.dialed = newFrameConn(conn, cfg.MaxBuffer, w.bigAnswer)
		return w.dialed, nil
	}
}

// closeAll closes the client and the socket it dialled last. Closing the connection on
// cancellation makes a read in flight return at once. The client's Close does not interrupt
// its handshake with a server (it reads the session answer with a deadline of ten receive
// timeouts), which a server still loading its database never sends: closing the socket it
// dialled does, and the dialer refuses to connect again (the client would otherwise retry, and
// wait as long on the next socket). Run's return closes both too, for it may come before the
// AfterFunc has run (stop then keeps it from running at all).
func (w *watcher) closeAll() {
	w.conn.Close()
	w.mu.Lock()
	if !w.closing {
		close(w.hosts.quit) // a reconnection's backoff ends
	}
	w.closing = true
	if w.dialed != nil {
		w.dialed.Close()
	}
	w.mu.Unlock()
}

// push queues an event from the client. It is the client's event callback: it must not block.
func (w *watcher) push(e zk.Event) {
	if e.Type == zk.EventSession && e.State == zk.StateExpired {
		// A server answered that the session expired: the client connects again for a new
		// one, and that attempt needs no pause. (The client calls this before it asks for
		// the next server.)
		w.hosts.Expired()
	}
	w.mu.Lock()
	w.queue = append(w.queue, e)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// zkLogger sends the client's log lines to the adapter's logger, at debug level: what matters
// (sessions, outages) the adapter logs itself.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zk client: " + fmt.Sprintf(format, args...))
}
