// Command render-seed writes the NoCloud seed files of a proxy, rendered by the kvm guest
// (internal/backend/kvm/guest) exactly as the kvm backend renders them, for the image smoke test
// (scripts/image/smoke-test.sh):
//
//	go run ./scripts/image/render-seed -dir DIR [-uid ID] [-hostname NAME] [-allow HOST,...] [-clients CIDR,...]
//
// It writes DIR/user-data and DIR/meta-data.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

func main() {
	dir := flag.String("dir", ".", "directory to write user-data and meta-data into")
	uid := flag.String("uid", "smoke-test-0001", "instance-id")
	hostname := flag.String("hostname", "egress-smoke", "local-hostname")
	allow := flag.String("allow", "allowed.example", "comma-separated allowed destinations")
	clients := flag.String("clients", "127.0.0.0/8,10.0.2.0/24", "comma-separated allowed client CIDRs")
	port := flag.Int("port", proxyconf.DefaultPort, "proxy port")
	flag.Parse()
	if err := run(*dir, *uid, *hostname, split(*allow), split(*clients), *port); err != nil {
		fmt.Fprintln(os.Stderr, "render-seed:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(dir, uid, hostname string, allow, clients []string, port int) error {
	s := proxyconf.Settings{Port: port, AllowedClientCIDRs: clients, AllowedDestinations: allow}
	userData, err := guest.RenderUserData(s, proxyconf.RenderOptions{})
	if err != nil {
		return err
	}
	metaData, err := guest.RenderMetaData(uid, hostname)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "user-data"), userData, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "meta-data"), metaData, 0o600)
}
