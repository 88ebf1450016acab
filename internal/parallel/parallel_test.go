package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Every index is run exactly once, whether in parallel or not, and on more than one goroutine
// only from minParallel on.
func TestFor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, tc := range []struct{ n, minParallel int }{{0, 1}, {1, 1}, {5, 100}, {1000, 1}, {1000, 10}} {
		runs := make([]atomic.Int32, tc.n)
		var running, most atomic.Int32
		For(tc.n, tc.minParallel, func(i int) {
			now := running.Add(1)
			for old := most.Load(); now > old && !most.CompareAndSwap(old, now); old = most.Load() {
			}
			runs[i].Add(1)
			runtime.Gosched() // let another goroutine, if any, take the next index meanwhile
			running.Add(-1)
		})
		for i := range runs {
			if got := runs[i].Load(); got != 1 {
				t.Errorf("n=%d min=%d: index %d ran %d times", tc.n, tc.minParallel, i, got)
			}
		}
		if tc.n < tc.minParallel && most.Load() > 1 {
			t.Errorf("n=%d min=%d: %d calls at once below minParallel", tc.n, tc.minParallel, most.Load())
		}
	}
	var sum atomic.Int64
	For(100, 10, func(i int) { sum.Add(int64(i)) })
	if got := sum.Load(); got != 4950 {
		t.Errorf("sum of 0..99 = %d, want 4950", got)
	}
}
