package istiod

import (
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/test/kube"
)

func TestZZTiming(t *testing.T) {
	rels, _ := Releases()
	rel := rels[len(rels)-1]
	for i := 0; i < 2; i++ {
		t0 := time.Now()
		c := kube.Start(t)
		t1 := time.Now()
		PrepareCluster(t, c, rel)
		t2 := time.Now()
		t.Logf("TIMING kube %v crds %v", t1.Sub(t0), t2.Sub(t1))
	}
}
