// Package loadgen is galleon-load's body: it writes registries of a given size into ZooKeeper
// (ZKGenerate), Eureka (EurekaGenerate) and Nacos (NacosGenerate; the file registry's generator
// is adapters/file/filetest/filegen), drives a running source with measuring sinks while it
// changes one service of that registry at a time (Run, RunEureka, RunNacos), serves the floor of an
// initial sync (CopyFloor) and runs hostile clients (RunAttackers).
//
// The sinks are the product's internal/loadtest, the ones its own benchmarks measure with; what
// is here serves only the bench module's tools and tests, so it stays out of the product module.
package loadgen
