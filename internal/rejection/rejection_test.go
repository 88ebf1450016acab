package rejection

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	base := errors.New("port 0")
	err := fmt.Errorf("node /a: %w", With("port", base))
	if got := Of(err, "other"); got != "port" {
		t.Errorf("Of(wrapped) = %q, want port", got)
	}
	if !errors.Is(err, base) || err.Error() != "node /a: port 0" {
		t.Errorf("the reason changed the error: %v", err)
	}
	if got := Of(base, "other"); got != "other" {
		t.Errorf("Of(untagged) = %q, want the fallback", got)
	}
}
