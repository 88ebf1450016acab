// Command galleon-zookeeper serves the services registered in Apache ZooKeeper (the Curator /
// Spring Cloud Zookeeper layout, <root>/<name>/<id>; the Dubbo 2 interface-level layout,
// <root>/<interface>/providers/<provider URL>; or the Dubbo 3 application-level layout,
// <root>/<application>/<ip:port>) to istiod as ServiceEntries.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.Main(builtin.ZooKeeper()))
}
