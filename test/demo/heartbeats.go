package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/test/internal/proc"
)

// heartbeatsCommand runs the demo's binary as its Eureka heartbeat process: `demo heartbeats
// FILE`. It is a process of its own so that, with DEMO_KEEP=1, the registrations stay renewed
// after the demo has exited.
const heartbeatsCommand = "heartbeats"

// heartbeatInterval is how often the registrations are renewed; a Eureka client renews every 30 s
// and Polaris drops an instance nobody renews about 90 s after it registered.
const heartbeatInterval = 10 * time.Second

// heartbeatsMain renews, every heartbeatInterval until SIGTERM, each registration FILE lists as
// "BASE-URL APP ID" lines (PUT <BASE-URL>/apps/APP/ID). The file is read whole each round, so a
// rename over it changes the list.
func heartbeatsMain(file string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(heartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		renewAll(ctx, file)
	}
}

func renewAll(ctx context.Context, file string) {
	f, err := os.Open(file)
	if err != nil {
		fmt.Printf("%s: %v\n", time.Now().Format(time.TimeOnly), err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		base, app, id := fields[0], fields[1], fields[2]
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := eurekatest.NewClient(base, nil).Renew(rctx, app, id); err != nil && ctx.Err() == nil {
			fmt.Printf("%s: renewing %s/%s in %s failed: %v\n", time.Now().Format(time.TimeOnly), app, id, base, err)
		}
		cancel()
	}
}

// heartbeats is the running heartbeat process and the file it reads.
type heartbeats struct {
	file string
	p    *proc.Process
}

// startHeartbeats runs the demo's own binary as the heartbeat process.
func (d *demo) startHeartbeats(file string) (*heartbeats, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		return nil, err
	}
	p, err := proc.Launch(proc.Config{
		Name: "eureka-heartbeats", Path: self, Args: []string{heartbeatsCommand, file},
		Dir: d.dir, LogPath: filepath.Join(d.logDir, "eureka-heartbeats.log"), Detach: d.detach(),
	})
	if err != nil {
		return nil, err
	}
	d.crew.add(&member{
		name: "the Eureka heartbeats", pid: p.Pid, exited: func() bool { ok, _ := p.Exited(); return ok },
		stop: p.Stop, logs: []namedLog{{"Eureka heartbeats", p.LogPath}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  renews the instances listed in %s every %v", p.Pid(), file, heartbeatInterval)
		},
	})
	return &heartbeats{file: file, p: p}, nil
}

// add hands a registration to the heartbeats.
func (h *heartbeats) add(base, app, id string) error {
	f, err := os.OpenFile(h.file, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s %s %s\n", base, app, id)
	return err
}

// drop stops renewing in the server at base (a rename: the process reads the file whole).
func (h *heartbeats) drop(base string) error {
	data, err := os.ReadFile(h.file)
	if err != nil {
		return err
	}
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line != "" && !strings.HasPrefix(line, base+" ") {
			keep = append(keep, line+"\n")
		}
	}
	return writeAtomic(h.file, []byte(strings.Join(keep, "")))
}
