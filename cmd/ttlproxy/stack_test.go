package main

import (
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/proxy"
)

// TestUpstreamTCP: the upstream_tcp section reaches the proxy, a
// tcp_user_timeout of 0s as "none" (negative) and an absent one as the
// proxy's default (0).
func TestUpstreamTCP(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   config.UpstreamTCP
		want proxy.UpstreamTCP
	}{
		{"absent", config.UpstreamTCP{}, proxy.UpstreamTCP{}},
		{"set", config.UpstreamTCP{KeepalivesIdle: 5 * time.Second, KeepalivesInterval: 2 * time.Second, KeepalivesCount: 4, TCPUserTimeout: new(3 * time.Second)},
			proxy.UpstreamTCP{KeepalivesIdle: 5 * time.Second, KeepalivesInterval: 2 * time.Second, KeepalivesCount: 4, TCPUserTimeout: 3 * time.Second}},
		{"off", config.UpstreamTCP{KeepalivesDisabled: true, TCPUserTimeout: new(time.Duration(0))},
			proxy.UpstreamTCP{KeepalivesDisabled: true, TCPUserTimeout: -1}},
	} {
		if got := upstreamTCP(tc.in); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
