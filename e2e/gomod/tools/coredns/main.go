// CoreDNS for the local cluster of e2e/up: upstream's coremain with the plugins its Corefile names (bind, kubernetes for
// Service and pod names under cluster.local, cache, errors, log, health, ready). Upstream's own main
// (github.com/coredns/coredns/coredns.go) is the same two lines with every plugin imported.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
