// Package eureka is Galleon's adapter for Netflix Eureka 1.x registries: Registry polls one
// server at a time (several for failover) with Netflix's fetch protocol, /apps once and then
// /apps/delta with apps__hashcode reconciliation (the loop in poller.go, which server is read in
// failover.go, what an answer changes in apply.go, the HTTP side in client.go), and maps each
// application to one service (mapping.go). Config and its flags (config.go,
// flags.go) are what cmd/galleon-eureka wires. docs/adapters/eureka.md describes it rule by rule.
//
// Beneath it, internal/wire is the registry-independent core: it decodes the listings a Eureka
// server answers, in every spelling a client meets, computes apps__hashcode and applies deltas
// as pure functions (see its package comment).
//
// The adapter asks for JSON (Accept: application/json): both servers serve it, it decodes
// in about half the time with a fraction of the garbage of XML (see docs/adapters/eureka.md,
// BenchmarkDecodeJSON2000x10 and BenchmarkDecodeXML2000x10), and Polaris writes metadata keys
// into XML element names unescaped, so one key with a '$' or a space makes its whole XML listing
// malformed.
//
// eurekatest runs a real Eureka API server (Polaris) for the tests and holds Client, the plain
// register/renew/cancel client the harness, the load generator and the end-to-end tests share.
package eureka
