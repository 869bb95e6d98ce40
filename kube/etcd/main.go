// Command etcd is etcd's own server entry point, built here from go.etcd.io/etcd/server/v3 at the
// version go.mod pins, in a module of its own so that its grpc/otel versions stay apart from
// Kubernetes'. etcdmain.Main is what upstream's server/main.go calls.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
