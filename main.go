// Command terraform-provider-egress serves the egress provider to Terraform and OpenTofu over protocol 6.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/egress-proxies/terraform-provider-egress/internal/provider"
)

// version is set at release time with -ldflags "-X main.version=..." (goreleaser: the tag without its "v"). It
// also names the Kubernetes proxies' default image, the one published with the release (see
// kubernetes.ReleaseImage, which reads what Go recorded when it stays "dev").
var version = "dev"

// Address is the provider's registry address; development overrides and reattach use it too.
const address = "registry.terraform.io/egress-proxies/egress"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers such as delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: address,
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
