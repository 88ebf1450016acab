package sidecar

import (
	"fmt"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// UnifiedMatcherListeners are the names of the listeners that use filter_chain_matcher, which
// Dial and HTTP refuse (sorted).
func (v *View) UnifiedMatcherListeners() []string {
	var out []string
	for _, name := range Names(v.Listeners) {
		if v.Listeners[name].GetFilterChainMatcher() != nil {
			out = append(out, name)
		}
	}
	return out
}

// DescribeListener summarises a listener's shape for test logs: its addresses, listener
// filters, whether it uses filter_chain_matcher, and each filter chain's match and terminal
// filter (the default chain last).
func (v *View) DescribeListener(name string) string {
	l, ok := v.Listeners[name]
	if !ok {
		return fmt.Sprintf("listener %s: not sent", name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listener %s:", name)
	for _, sa := range socketAddresses(l) {
		fmt.Fprintf(&b, " %s:%d", sa.GetAddress(), sa.GetPortValue())
	}
	bind := "unset"
	if l.GetBindToPort() != nil {
		bind = fmt.Sprint(l.GetBindToPort().GetValue())
	}
	fmt.Fprintf(&b, " use_original_dst=%v bind_to_port=%s", l.GetUseOriginalDst().GetValue(), bind)
	var lfs []string
	for _, f := range l.GetListenerFilters() {
		lfs = append(lfs, f.GetName())
	}
	fmt.Fprintf(&b, " listener_filters=%v filter_chain_matcher=%v\n", lfs, l.GetFilterChainMatcher() != nil)
	describe := func(kind string, fc *listenerv3.FilterChain) {
		match := "{}"
		if m := fc.GetFilterChainMatch(); m != nil {
			match = protojson.MarshalOptions{}.Format(m)
		}
		var d Destination
		term := "?"
		if _, err := terminalFilter(&d, fc); err != nil {
			term = err.Error()
		} else if d.HTTP {
			term = "HTTP rds " + d.RouteConfig
		} else {
			term = "tcp_proxy " + d.Cluster
			if len(d.WeightedClusters) > 0 {
				term += fmt.Sprint(d.WeightedClusters)
			}
		}
		fmt.Fprintf(&b, "  %s %q match %s -> %s\n", kind, fc.GetName(), match, term)
	}
	for _, fc := range l.GetFilterChains() {
		describe("chain", fc)
	}
	if d := l.GetDefaultFilterChain(); d != nil {
		describe("default_filter_chain", d)
	}
	return b.String()
}
