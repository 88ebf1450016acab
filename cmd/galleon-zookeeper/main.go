// Command galleon-zookeeper serves the services registered in Apache ZooKeeper (the Curator /
// Spring Cloud Zookeeper layout, <root>/<name>/<id>; the Dubbo 2 interface-level layout,
// <root>/<interface>/providers/<provider URL>; the Dubbo 3 application-level layout,
// <root>/<application>/<ip:port>; or several of them side by side, --zk-layout) to istiod as
// ServiceEntries. See docs/adapters/zookeeper.md.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.Main(builtin.ZooKeeper()))
}
