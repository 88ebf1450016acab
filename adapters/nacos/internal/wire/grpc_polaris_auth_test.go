package wire

import (
	"context"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// TestPolarisGRPCAuth pins what Polaris's gRPC Nacos API asks of a client when its client
// authentication is on: nothing, for what this client does. Subscribe and ListServices read
// Polaris's cache without an authorization check (v2/discover/subscribe.go,
// v2/discover/services.go; only instance writes go through the auth-checking DiscoverServer),
// where Alibaba's Nacos refuses them without a token (403). The token, when given, is sent and
// does no harm.
func TestPolarisGRPCAuth(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server")
	s := nacostest.Start(t, nacostest.Options{Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, withToken := range []bool{false, true} {
		cfg := DialConfig{Address: s.GRPCAddr, Timeout: 5 * time.Second, Logger: testLogger(t)}
		if withToken {
			// Polaris's Nacos login answers the password (a Polaris token) as the accessToken
			// (v1/auth.go handleLogin): the token is the password.
			cfg.Tokens = NewTokenSource(func(context.Context) (string, time.Duration, error) {
				return s.Password, 120 * time.Second, nil
			})
		}
		c, err := Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("token %v: Dial: %v", withToken, err)
		}
		if _, err := c.Subscribe(ctx, Ref{Service: "x"}); err != nil {
			t.Errorf("token %v: Subscribe: %v", withToken, err)
		}
		if _, err := c.ListServices(ctx, "", "", 1, 10); err != nil {
			t.Errorf("token %v: ListServices: %v", withToken, err)
		}
		_ = c.Close()
	}
}
