package model

import "strings"

// istioProtocols are the port protocols istiod accepts (pkg/config/protocol.Parse, which
// ignores case), as internal/convert's validation checks them: the ten constants above plus
// HTTP_PROXY and GRPC-WEB, which no adapter maps to but a registry may name.
var istioProtocols = [...]Protocol{
	ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP2, "HTTP_PROXY", ProtocolGRPC, "GRPC-WEB",
	ProtocolTCP, ProtocolTLS, ProtocolUDP, ProtocolMongo, ProtocolMySQL, ProtocolRedis,
}

// Valid reports whether a port may carry p: empty (TCP) or a protocol istiod accepts, in any
// case. A port with any other protocol makes its whole ServiceEntry invalid, so an adapter that
// takes a protocol from an instance checks it here and leaves that instance out instead.
func (p Protocol) Valid() bool {
	if p == "" {
		return true
	}
	for _, known := range istioProtocols {
		if strings.EqualFold(string(p), string(known)) {
			return true
		}
	}
	return false
}
