// Command k8scluster is every server of a single-node Kubernetes test cluster
// in one binary: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kube-proxy. One binary because the six share
// most of their code: linked separately they would take six times the disk
// and most of the link time again on every rebuild.
//
// The component is chosen by the name the binary is called by (a symlink
// named kubelet) or, failing that, by the first argument
// (k8scluster kubelet --config ...). It is built by scripts/build-k8s.sh,
// never shipped with the provider and never imported by it.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // the controller manager's CronJob time zones

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in the upstream mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as in the upstream mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as in the upstream mains
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// commands builds each component's cobra command lazily: building all of
// them would register flags and feature gates the chosen one never uses.
var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler": func() *cobra.Command {
		return scheduler.NewSchedulerCommand()
	},
	"kubelet": func() *cobra.Command {
		return kubelet.NewKubeletCommand(context.Background())
	},
	"kube-proxy": proxy.NewProxyCommand,
	// Not a Kubernetes component: kube-router's NetworkPolicy controller (netpol.go).
	"network-policy": newNetworkPolicyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if !known(name) && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	if name == "etcd" {
		// etcdmain parses os.Args itself, with the program name first.
		etcdmain.Main(append([]string{"etcd"}, args...))
		return
	}
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "k8scluster: unknown component %q; one of: %v\n", name, names())
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

func known(name string) bool {
	_, ok := commands[name]
	return ok || name == "etcd"
}

func names() []string {
	out := []string{"etcd"}
	for n := range commands {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
