// Package parallel runs independent pieces of one large job on every core.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// For calls fn(i) for every i in [0, n) and returns when all calls have returned. With n
// at least minParallel (and more than one CPU usable) the calls are spread over GOMAXPROCS
// goroutines, which take the next index as they finish one, so uneven pieces balance out;
// below it, starting goroutines costs more than it saves and fn runs on the caller's
// goroutine in order. fn must be safe to call concurrently for distinct i.
func For(n, minParallel int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if n < minParallel || workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}
