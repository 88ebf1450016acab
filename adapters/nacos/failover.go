package nacos

import (
	"context"
	"fmt"
	"time"
)

// Which server is watched: the one in use until it fails, then the next that answers (watch.go
// connect). The others are probed in the background, each with its own back-off while it
// fails, so that a dead standby is reported (Degraded) before a failover needs it, and a
// server back is reported Degraded(server, nil).

func (w *watcher) serverUp(i int) {
	s := &w.servers[i]
	if s.down {
		w.r.log.Info("Nacos server answers again", "server", w.r.servers[i].name)
		w.rec.Degraded(w.r.servers[i].name, nil)
	}
	*s = serverState{probing: s.probing, next: time.Now().Add(jitter(standbyProbe))}
	w.r.metrics.serverUp.WithLabelValues(w.r.servers[i].name).Set(1)
}

func (w *watcher) serverDown(i int, err error) {
	s := &w.servers[i]
	if !s.down {
		w.r.log.Warn("Nacos server failed", "server", w.r.servers[i].name, "err", err)
	}
	s.down, s.err = true, err
	s.backoff = min(max(2*s.backoff, minProbe), maxProbe)
	s.next = time.Now().Add(jitter(s.backoff))
	w.r.metrics.serverUp.WithLabelValues(w.r.servers[i].name).Set(0)
}

// reportDown reports the servers down while another answers (the Reconciler repeats nothing).
func (w *watcher) reportDown() {
	for i := range w.servers {
		if s := &w.servers[i]; s.down && i != w.cur {
			w.rec.Degraded(w.r.servers[i].name, s.err)
		}
	}
}

// startProbes probes the servers other than the one in use that are due, one check each, in
// the background.
func (w *watcher) startProbes(ctx context.Context) {
	now := time.Now()
	for i := range w.servers {
		s := &w.servers[i]
		if s.probing || i == w.cur || now.Before(s.next) {
			continue
		}
		s.probing = true
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			err := w.dial.probe(ctx, i)
			if err != nil {
				err = w.r.redact.error(fmt.Errorf("%s: %w", w.r.servers[i].name, err))
			}
			if ctx.Err() == nil {
				w.countAt(i, reqProbe, err)
			}
			select {
			case w.probes <- probeResult{i, err}:
			case <-ctx.Done():
			}
		}()
	}
}

// probed records a probe's result.
func (w *watcher) probed(pr probeResult) {
	w.servers[pr.i].probing = false
	if pr.i == w.cur {
		return // in use since: its session says how it is
	}
	if pr.err != nil {
		w.serverDown(pr.i, pr.err)
		if !w.outage {
			w.rec.Degraded(w.r.servers[pr.i].name, pr.err)
		}
		return
	}
	wasDown := w.servers[pr.i].down
	w.serverUp(pr.i)
	if wasDown && !w.outage && w.synced {
		w.rec.Flush() // tells Degraded(server, nil); nothing else is pending
	}
}

// probe checks that server i answers as a session would need: a gRPC connection's setup
// (closed at once), or with the HTTP API (or, with --nacos-api auto, a server never seen with
// a gRPC API) one page of one service.
func (d *dialer) probe(ctx context.Context, i int) error {
	cfg := &d.r.cfg
	if cfg.API != APIHTTP {
		err := d.probeGRPC(ctx, i)
		if err == nil || !d.mayFallBack(i, err) || ctx.Err() != nil {
			return err
		}
	}
	secretKey, err := cfg.secretKey()
	if err != nil {
		return err
	}
	hc, err := d.httpClient(i, d.tokens[i], secretKey)
	if err != nil {
		return err
	}
	defer hc.Close()
	ns := ""
	if len(d.r.scope.namespaces) > 0 {
		ns = d.r.scope.namespaces[0]
	}
	_, err = hc.ListServices(ctx, ns, DefaultGroup, 1, 1)
	return err
}

// probeGRPC sets up a gRPC connection to server i and closes it.
func (d *dialer) probeGRPC(ctx context.Context, i int) error {
	secretKey, err := d.r.cfg.secretKey()
	if err != nil {
		return err
	}
	hc, err := d.httpClient(i, d.tokens[i], secretKey)
	if err != nil {
		return err
	}
	s, err := d.dialGRPC(ctx, i, hc, secretKey, newInbox(1))
	if err != nil {
		hc.Close()
		return err
	}
	s.close()
	return nil
}

// startUpgrade, while server i is watched over HTTP with --nacos-api auto, checks in the
// background (every standbyProbe) whether it has a gRPC API now: a server upgraded from Nacos
// 1.x, or whose gRPC port failed when the session began. The session then ends, and the next
// is a gRPC one.
func (w *watcher) startUpgrade(ctx context.Context, sess session) {
	if sess.api() != APIHTTP || w.r.cfg.API != APIAuto || w.upgrading || time.Now().Before(w.nextUpgrade) {
		return
	}
	w.upgrading = true
	w.nextUpgrade = time.Now().Add(jitter(standbyProbe))
	i := w.cur
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		err := w.dial.probeGRPC(ctx, i)
		select {
		case w.upgrades <- err == nil:
		case <-ctx.Done():
		}
	}()
}
