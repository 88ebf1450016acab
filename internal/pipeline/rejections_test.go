package pipeline

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/model"
)

// TestRejectionsAreToldOnceAndCountedExactly: issue 27 found every rejection
// logged again after each outage (5,000 bad instances, 5,000 lines, then
// 10,000 after one relisting) and the count drifting (5,000 -> 9,000). A
// rejection reported again with the same error is not logged or counted
// again, a reason logs at most logBurst lines a minute, and the count of
// records malformed now stays exact beyond the listed ones.
func TestRejectionsAreToldOnceAndCountedExactly(t *testing.T) {
	var logs syncbuf.Buffer
	p, _ := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const n = 5000
	for range 2 { // the second round is the relisting after an outage
		for i := range n {
			p.Rejected(fmt.Sprintf("instance-%d", i), fmt.Errorf("port is not a number"))
		}
	}
	if _, total := p.Rejections(0); total != n {
		t.Fatalf("%d records counted as malformed, want %d", total, n)
	}
	lines := strings.Count(logs.String(), `msg="registry record skipped"`)
	if lines != logBurst {
		t.Errorf("%d lines for %d rejections reported twice, want the burst of %d", lines, n, logBurst)
	}
	if !strings.Contains(logs.String(), "more lines like the last are not logged this minute") {
		t.Errorf("the log does not say lines were left out:\n%s", logs.String())
	}
	for i := range n {
		p.Rejected(fmt.Sprintf("instance-%d", i), nil)
	}
	if _, total := p.Rejections(0); total != 0 {
		t.Fatalf("%d records counted as malformed after every one was fixed", total)
	}
	if got := gauge(t, p.metrics.recordsRejectedNow); got != 0 {
		t.Fatalf("galleon_registry_malformed_records = %v after every record was fixed", got)
	}
}

// TestLongNamesAndErrorsAreCut: a registry chooses its names (issue 27: 610
// names of 200 KB made 244 MB of log and 863 MiB resident). What is logged
// and kept of a record name and an error is bounded, and two long names
// that share their beginning stay two records.
func TestLongNamesAndErrorsAreCut(t *testing.T) {
	var logs syncbuf.Buffer
	p, _ := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	long := strings.Repeat("n", 200_000)
	for i := range 600 {
		p.Rejected(long+fmt.Sprint(i), fmt.Errorf("bad value %s", long))
	}
	list, total := p.Rejections(1000)
	if total != 600 || len(list) != 600 {
		t.Fatalf("%d records (%d listed), want 600 apart", total, len(list))
	}
	for _, r := range list {
		if len(r.Record) > MaxRecordLen+64 || len(r.Error) > MaxErrorLen+64 {
			t.Fatalf("kept a record of %d bytes and an error of %d", len(r.Record), len(r.Error))
		}
	}
	for i := range 600 {
		p.Rejected(long+fmt.Sprint(i), nil)
	}
	if _, total := p.Rejections(0); total != 0 {
		t.Fatalf("%d left after clearing every long record", total)
	}
	if n := logs.Len(); n > 100_000 {
		t.Errorf("%d bytes of log for 600 long names rejected and cleared", n)
	}
	if got := Cut("héllo wörld", 3); got == "héllo wörld" || !strings.Contains(got, "bytes") {
		t.Errorf("Cut left %q", got)
	}
}

// TestBadInstanceDoesNotFreezeItsService: issue 27 found one instance that
// fails istiod's rules got its whole service refused, so departed instances
// kept traffic and new ones never arrived. The instance is left out, named
// in the rejections, and the service served; fixing it clears the record.
func TestBadInstanceDoesNotFreezeItsService(t *testing.T) {
	p, store := run(t, Config{})
	svc := service("a", "10.0.0.1", "10.0.0.2")
	p.Replace([]model.Service{svc})
	snap := waitSeq(t, store, 0)

	next := service("a", "10.0.0.2", "10.0.0.3", "10.0.0.4") // 10.0.0.1 leaves, two arrive
	next.Instances[2].Locality = strings.Repeat("z", 3000)   // one of them is malformed
	p.Update(next)
	snap = waitSeq(t, store, snap.Seq)
	if got := endpoints(t, snap, "ns/a"); strings.Join(got, ",") != "10.0.0.2,10.0.0.3" {
		t.Fatalf("served endpoints %v, want 10.0.0.2 and 10.0.0.3 (10.0.0.1 left, 10.0.0.4 is malformed)", got)
	}
	list, total := p.Rejections(10)
	if total != 1 || list[0].Record != "service ns/a instance a2" || list[0].Reason != reasonInstanceInvalid ||
		!strings.Contains(list[0].Error, "locality: longer than 2048 bytes") {
		t.Fatalf("rejections %+v, want instance a2 of ns/a named with its reason", list)
	}
	p.Update(service("a", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
	snap = waitSeq(t, store, snap.Seq)
	if got := endpoints(t, snap, "ns/a"); len(got) != 3 {
		t.Fatalf("served endpoints %v after the fix, want 3", got)
	}
	if _, total := p.Rejections(10); total != 0 {
		t.Fatalf("%d rejections left after the instance was fixed", total)
	}
}

// TestInvalidServiceIsListed: a service the core cannot serve is listed in
// the rejections (and so in /debug/status) until it is fixed or deleted.
func TestInvalidServiceIsListed(t *testing.T) {
	p, store := run(t, Config{})
	bad := service("b", "10.0.0.9")
	bad.Ports[0].Protocol = "SOAP"
	p.Replace([]model.Service{service("a", "10.0.0.1"), bad})
	waitSeq(t, store, 0)
	list, total := p.Rejections(10)
	if total != 1 || list[0].Record != "service ns/b" || list[0].Reason != reasonServiceInvalid || !strings.Contains(list[0].Error, "(not served)") {
		t.Fatalf("rejections %+v, want service ns/b", list)
	}
	p.Delete(bad.Key())
	deadline := time.Now().Add(5 * time.Second)
	for _, total := p.Rejections(0); total != 0; _, total = p.Rejections(0) {
		if time.Now().After(deadline) {
			t.Fatal("the deleted service is still listed as rejected")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDegradedPartsAreCut: a part name and its error are the registry's
// (a server URL, a datacenter): bounded as kept and logged like records.
func TestDegradedPartsAreCut(t *testing.T) {
	var logs syncbuf.Buffer
	p, _ := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	long := strings.Repeat("d", 100_000)
	p.Degraded(long, fmt.Errorf("refused: %s", long))
	for part, err := range p.DegradedParts() {
		if len(part) > MaxRecordLen+64 || len(err) > MaxErrorLen+64 {
			t.Fatalf("kept a part of %d bytes and an error of %d", len(part), len(err))
		}
	}
	p.Degraded(long, nil)
	if n := len(p.DegradedParts()); n != 0 {
		t.Fatalf("%d parts left after the long one came back", n)
	}
	p.Unreachable(fmt.Errorf("refused: %s", long))
	if n := logs.Len(); n > 8_000 {
		t.Errorf("%d bytes of log for a long part and error", n)
	}
}
