package main

// The test cluster's NetworkPolicy enforcement: kube-router's network policy controller alone, without its
// routing (BGP) and service proxy controllers, whose packages this binary never imports (kube-proxy and the
// bridge CNI plugin do their jobs). It programs iptables and ipset in the network namespace it runs in, which
// scripts/k8s-env.sh makes the cluster's own: the machine's firewall never sees its rules.
//
// kube-router v2.1.0 has published security advisories. It is a test component here, never shipped with the
// provider, run on a cluster that exists only for the acceptance tests; it is chosen because this machine's
// kernel has iptables' NFQUEUE and ipset but not nftables' queue statement, which the nftables-based
// policy controllers need.

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
)

func newNetworkPolicyCommand() *cobra.Command {
	config := options.NewKubeRouterConfig()
	config.EnableIPv4 = true
	cmd := &cobra.Command{
		Use:   "network-policy",
		Short: "Enforces the cluster's NetworkPolicies in this network namespace (kube-router's policy controller)",
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runNetworkPolicy(ctx, config)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&config.Kubeconfig, "kubeconfig", "", "the kubeconfig to reach the API server with")
	fs.StringVar(&config.HostnameOverride, "hostname-override", "", "the name of the node whose pods are policed")
	fs.StringSliceVar(&config.ClusterIPCIDRs, "service-cluster-ip-range", config.ClusterIPCIDRs, "the Services' address range")
	fs.StringVar(&config.NodePortRange, "service-node-port-range", config.NodePortRange, "the NodePort range")
	fs.DurationVar(&config.IPTablesSyncPeriod, "iptables-sync-period", config.IPTablesSyncPeriod,
		"how often the rules are rewritten whole, besides on every change of a pod, namespace or policy")
	return cmd
}

func runNetworkPolicy(ctx context.Context, config *options.KubeRouterConfig) error {
	if config.HostnameOverride == "" {
		return errors.New("--hostname-override must name the node")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", config.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", config.Kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	// The controller reads the node's address once, when it is made; it starts beside the kubelet, which
	// registers the node a moment later.
	if err := waitForNodeAddress(ctx, cs, config.HostnameOverride); err != nil {
		return err
	}

	factory := informers.NewSharedInformerFactory(cs, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	stopCh := make(chan struct{})
	stop := sync.OnceFunc(func() { close(stopCh) })
	defer stop()
	factory.Start(stopCh)
	for informer, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("the %v cache did not sync: %w", informer, ctx.Err())
		}
	}

	iptablesHandlers, ipsetHandlers, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return err
	}
	var ipsetMutex sync.Mutex
	npc, err := netpol.NewNetworkPolicyController(cs, config, pods, policies, namespaces, &ipsetMutex, iptablesHandlers, ipsetHandlers)
	if err != nil {
		return err
	}
	for informer, handler := range map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		pods: npc.PodEventHandler, namespaces: npc.NamespaceEventHandler, policies: npc.NetworkPolicyEventHandler,
	} {
		if _, err := informer.AddEventHandler(handler); err != nil {
			return err
		}
	}

	// The controller reports a heartbeat before each sync and blocks until someone takes it; kube-router's
	// health server would, here nothing asks.
	heartbeats := make(chan *healthcheck.ControllerHeartbeat, 1)
	go func() {
		for range heartbeats {
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go npc.Run(heartbeats, stopCh, &wg)
	klog.Infof("enforcing NetworkPolicies for the pods of node %s", config.HostnameOverride)
	<-ctx.Done()
	stop()
	wg.Wait()
	return nil
}

// waitForNodeAddress returns once the node is registered with an InternalIP.
func waitForNodeAddress(ctx context.Context, cs kubernetes.Interface, name string) error {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.FieldSelector = selector
	})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
		node, ok := ev.Object.(*corev1.Node)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to register with an address: %w", name, err)
	}
	return nil
}
