package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// The memory a listing takes is bounded by what it lists, not by its bytes: a body within
// --eureka-max-body of minimal instances (47 bytes each in JSON) decodes to about ten times its
// size, so the decoder counts instances and applications as it reads them and refuses the
// listing at the first one over --eureka-max-instances or --eureka-max-apps, without holding
// the body or the rest of the listing (issue 27, finding 5).

// listing streams a listing of n records without holding it, as a server's answer arrives
// (so that the listing's bytes do not count in the heap a test measures): head, then each
// record(i), with sep between them, then tail.
type listing struct {
	head, sep, tail string
	record          func(b []byte, i int) []byte
	n, i            int
	buf             []byte
	done            bool
}

func (l *listing) Read(p []byte) (int, error) {
	for len(l.buf) == 0 {
		switch {
		case l.done:
			return 0, io.EOF
		case l.i == 0 && l.head != "":
			l.buf = append(l.buf, l.head...)
			l.head = ""
			continue
		case l.i < l.n:
			// A few thousand records at a time.
			for k := 0; k < 4096 && l.i < l.n; k++ {
				if l.i > 0 {
					l.buf = append(l.buf, l.sep...)
				}
				l.buf = l.record(l.buf, l.i)
				l.i++
			}
		default:
			l.buf = append(l.buf, l.tail...)
			l.done = true
		}
	}
	n := copy(p, l.buf)
	l.buf = l.buf[n:]
	if len(l.buf) == 0 {
		l.buf = l.buf[:0:0]
	}
	return n, nil
}

// size is how many bytes the listing holds, read through.
func size(r io.Reader) int64 {
	n, _ := io.Copy(io.Discard, r)
	return n
}

// minimalJSON is a listing of n instances of one application, each as small as a servable
// instance can be: {"hostName":"h0000000","status":"UP","port":1}, 47 bytes.
func minimalJSON(n int) io.Reader {
	return &listing{head: `{"applications":{"application":[{"name":"A","instance":[`, sep: ",", tail: `]}]}}`, n: n,
		record: func(b []byte, i int) []byte { return fmt.Appendf(b, `{"hostName":"h%07d","status":"UP","port":1}`, i) }}
}

// minimalXML is a listing of n instances of one application, 64 bytes each:
// <instance><hostName>h0000000</hostName><port>1</port></instance>. A servable instance takes
// at least 72 bytes of XML, so a million within 64 MiB are instances without a status: each is
// skipped with its reason, and a skipped instance is held too (for the hashcode and
// /debug/status), so it counts against the limit as a servable one does.
func minimalXML(n int) io.Reader {
	return &listing{head: `<applications><application><name>A</name>`, tail: `</application></applications>`, n: n,
		record: func(b []byte, i int) []byte {
			return fmt.Appendf(b, `<instance><hostName>h%07d</hostName><port>1</port></instance>`, i)
		}}
}

// manyAppsJSON is a listing of n applications of one minimal instance each.
func manyAppsJSON(n int) io.Reader {
	return &listing{head: `{"applications":{"application":[`, sep: ",", tail: `]}}`, n: n,
		record: func(b []byte, i int) []byte {
			return fmt.Appendf(b, `{"name":"A%07d","instance":[{"hostName":"h","status":"UP","port":1}]}`, i)
		}}
}

// peakHeap runs f and returns the most heap its objects took above what they took before
// (live and not yet collected: what the process must hold), sampled every millisecond.
func peakHeap(f func()) uint64 {
	runtime.GC()
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		rtmetrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var peak uint64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	f()
	cancel()
	wg.Wait()
	peak = max(peak, read())
	if peak < base {
		return 0
	}
	return peak - base
}

// TestDecodeMemoryBounded: a million minimal instances within the default 64 MiB, in JSON and
// in XML, and 200,000 applications, are each refused with a LimitError at the default limits,
// and decoding them peaks under 150 MiB of heap (the figures are logged; before the limits the
// JSON one decoded whole: 2,128 MiB of heap for the decoder alone, docs/reliability.md). A listing
// just within the limits decodes.
func TestDecodeMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 64 MiB listings")
	}
	toolcache.RequireFullTier(t, "builds 64 MiB listings")
	const bound = 150 << 20
	for _, tc := range []struct {
		name, ct string
		body     func() io.Reader
		what     string
	}{
		{"1,000,000 minimal JSON instances", "application/json", func() io.Reader { return minimalJSON(1_000_000) }, LimitInstances},
		{"1,000,000 minimal XML instances", "application/xml", func() io.Reader { return minimalXML(1_000_000) }, LimitInstances},
		{"200,000 JSON applications", "application/json", func() io.Reader { return manyAppsJSON(200_000) }, LimitApplications},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := size(tc.body())
			if n > DefaultMaxBody {
				t.Fatalf("the listing is %d bytes, over DefaultMaxBody", n)
			}
			var err error
			peak := peakHeap(func() { _, err = Decode(tc.body(), tc.ct, 0) })
			le, ok := errors.AsType[*LimitError](err)
			if !ok || le.What != tc.what {
				t.Errorf("%d bytes: %v, want a LimitError on %s", n, err, tc.what)
			}
			t.Logf("%d bytes: peak heap %.1f MiB; %v", n, float64(peak)/(1<<20), err)
			if peak > bound {
				t.Errorf("decoding %d bytes peaked at %.1f MiB of heap, over %d MiB", n, float64(peak)/(1<<20), bound>>20)
			}
		})
	}
	t.Run("at the limits", func(t *testing.T) {
		a, err := DecodeLimits(minimalJSON(1000), "", Limits{MaxInstances: 1000})
		if err != nil || len(a.Apps) != 1 || len(a.Apps[0].Instances) != 1000 {
			t.Fatalf("1,000 instances, limit 1,000: %v", err)
		}
		if _, err := DecodeLimits(minimalXML(1001), "", Limits{MaxInstances: 1000}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("1,001 XML instances, limit 1,000: %v, want ErrTooLarge", err)
		}
		a, err = DecodeLimits(manyAppsJSON(100), "", Limits{MaxApps: 100})
		if err != nil || len(a.Apps) != 100 {
			t.Fatalf("100 applications, limit 100: %v", err)
		}
		if _, err := DecodeLimits(manyAppsJSON(101), "", Limits{MaxApps: 100}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("101 applications, limit 100: %v, want ErrTooLarge", err)
		}
	})
}

// TestDecodeMemoryPerInstance measures what a million minimal instances take decoded whole
// (--eureka-max-instances raised to a million), the figure the default limit is chosen by.
func TestDecodeMemoryPerInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 64 MiB listings")
	}
	toolcache.RequireFullTier(t, "builds 64 MiB listings")
	for _, tc := range []struct {
		name string
		body func() io.Reader
	}{
		{"JSON", func() io.Reader { return minimalJSON(1_000_000) }},
		{"XML", func() io.Reader { return minimalXML(1_000_000) }},
	} {
		var a *Applications
		var err error
		peak := peakHeap(func() {
			a, err = DecodeLimits(tc.body(), "", Limits{MaxInstances: 1_000_000})
		})
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("%s: 1,000,000 instances in %d bytes decoded whole: peak heap %.1f MiB, %.1f MiB live after (%d served, %d skipped)",
			tc.name, size(tc.body()), float64(peak)/(1<<20), float64(ms.HeapAlloc)/(1<<20), a.Servable(), len(a.Skipped))
		runtime.KeepAlive(a)
	}
}
