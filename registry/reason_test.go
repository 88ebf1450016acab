package registry_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/galleon-mesh/galleon/registry"
)

func TestReasonSurvivesWrapping(t *testing.T) {
	base := errors.New("port 0")
	err := fmt.Errorf("node /a: %w", registry.Reason("port", base))
	if got := registry.ReasonOf(err, "other"); got != "port" {
		t.Errorf("ReasonOf(wrapped) = %q, want port", got)
	}
	if !errors.Is(err, base) || err.Error() != "node /a: port 0" {
		t.Errorf("the reason changed the error: %v", err)
	}
	if got := registry.ReasonOf(base, "other"); got != "other" {
		t.Errorf("ReasonOf(untagged) = %q, want the fallback", got)
	}
}
