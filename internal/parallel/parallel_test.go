package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Every index is run exactly once, whether in parallel or not, and each worker's fn comes
// from its own newWorker call.
func TestForEachWorker(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, tc := range []struct{ n, minParallel int }{{0, 1}, {1, 1}, {5, 100}, {1000, 1}, {1000, 10}} {
		runs := make([]atomic.Int32, tc.n)
		var workers atomic.Int32
		ForEachWorker(tc.n, tc.minParallel, func() func(int) {
			workers.Add(1)
			return func(i int) { runs[i].Add(1) }
		})
		for i := range runs {
			if got := runs[i].Load(); got != 1 {
				t.Errorf("n=%d min=%d: index %d ran %d times", tc.n, tc.minParallel, i, got)
			}
		}
		want := int32(1)
		switch {
		case tc.n == 0:
			want = 0
		case tc.n >= tc.minParallel:
			want = int32(min(4, tc.n))
		}
		if got := workers.Load(); got != want {
			t.Errorf("n=%d min=%d: %d workers, want %d", tc.n, tc.minParallel, got, want)
		}
	}
}

func TestFor(t *testing.T) {
	var sum atomic.Int64
	For(100, 10, func(i int) { sum.Add(int64(i)) })
	if got := sum.Load(); got != 4950 {
		t.Errorf("sum of 0..99 = %d, want 4950", got)
	}
}
