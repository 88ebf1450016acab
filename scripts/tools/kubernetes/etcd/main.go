// Command etcd is etcd's own server, built from go.etcd.io/etcd/server/v3 for the deploy tests
// (toolcache.KubeTool, `devtool build etcd`): the proxy does not serve the root module that holds
// etcd's main package, so this is that package's one call.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
