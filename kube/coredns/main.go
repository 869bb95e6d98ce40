// CoreDNS with the plugins a cluster DNS needs and no others, for `slinkyml dev kube up --kubelet`.
//
// CoreDNS selects its plugins at compile time: a main package imports the plugins it wants and trims
// dnsserver.Directives (the order plugins run in) to them, as upstream documents for builds with a
// chosen plugin set. The order is upstream's own list (core/dnsserver/zdirectives.go), filtered.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// the plugins imported above: a Corefile may name these and no others (bind: a development machine's
// cluster DNS listens on the addresses it is given, not on all of them)
var plugins = map[string]bool{
	"bind": true, "cache": true, "errors": true, "forward": true, "health": true, "kubernetes": true,
	"loadbalance": true, "loop": true, "ready": true, "reload": true,
}

func init() {
	kept := dnsserver.Directives[:0:0]
	for _, name := range dnsserver.Directives {
		if plugins[name] {
			kept = append(kept, name)
		}
	}
	dnsserver.Directives = kept
}

func main() {
	coremain.Run()
}
