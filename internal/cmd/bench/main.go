// Command bench is what the benchmark scripts need besides the shell, Terraform, virsh and the load
// generators: their arithmetic (elapsed seconds, the tables of seconds and ratios they print); for
// scripts/bench-k8s.sh, the few Kubernetes calls it makes with the clientset the provider uses (no kubectl
// needed): the namespace it works in, the objects a proxy is made of, and the raw REST baseline it times
// egress_proxy against; for scripts/bench-dataplane.sh the squid.conf this project renders, the origin,
// and the CONNECT client wrk and hey cannot stand in for (see runTunnels); and for its pods leg,
// scripts/bench-dataplane-k8s.sh, the proxy pods (dataplane-pod).
//
//	bench elapsed [-decimals N] START END
//	bench k8s-table COUNT... <TIMINGS
//	bench kvm-table -proxies N -instance NAME -window W [-fixed-ip] <TIMINGS
//	bench namespace create|delete -kubeconfig FILE NAME
//	bench objects -namespace NS -image IMAGE
//	bench raw create|destroy -kubeconfig FILE -namespace NS -image IMAGE -proxies N [-parallel P]
//	bench dataplane-render -size small|large [-tls] -dir DIR -listen IP -origin HOST -client CIDR [-hosts FILE]
//	bench origin ADDRESS...
//	bench wait [-timeout D] ADDRESS...
//	bench tunnels -target HOST:PORT [-proxy ADDR] [-proxy-ca FILE] [-auth-file FILE] [-sources IPS] [-c N] [-duration D] [-rate R]
//	bench hold -target HOST:PORT -pid PID [-n N] [-proxy ADDR] [-proxy-ca FILE] [-auth-file FILE] [-sources IPS]
//	bench hey-summary -seconds S <HEY_CSV
//	bench dataplane-half SUBJECT http|tunnels <RESULTS
//	bench dataplane-check SUBJECT... <RESULTS
//	bench dataplane-table <RESULTS
//	bench dataplane-pod create|delete -kubeconfig FILE -namespace NS -subject S [-image IMAGE -origin HOST -client CIDR -ports P,... -dir DIR]
//
// START and END are `date +%s.%N`; TIMINGS are lines of a step's label and its seconds as elapsed printed
// them. The scripts build it once (go build) before anything is timed, so no timed step includes a compile.
// It lives in the main module, not in tools/ (a module of its own for tool dependencies): the raw baseline
// renders its objects with the kubernetes backend's code and runs the provider's client-go, at the provider's
// versions.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  bench elapsed [-decimals N] START END
  bench k8s-table COUNT... <TIMINGS
  bench kvm-table -proxies N -instance NAME -window W [-fixed-ip] <TIMINGS
  bench namespace create|delete -kubeconfig FILE NAME
  bench objects -namespace NS -image IMAGE
  bench raw create|destroy -kubeconfig FILE -namespace NS -image IMAGE -proxies N [-parallel P]
  bench dataplane-render -size small|large [-tls] -dir DIR -listen IP -origin HOST -client CIDR [-hosts FILE]
  bench origin ADDRESS...
  bench wait [-timeout D] ADDRESS...
  bench tunnels -target HOST:PORT [-proxy ADDR] [-proxy-ca FILE] [-auth-file FILE] [-sources IPS] [-c N] [-duration D] [-rate R]
  bench hold -target HOST:PORT -pid PID [-n N] [-proxy ADDR] [-proxy-ca FILE] [-auth-file FILE] [-sources IPS]
  bench hey-summary -seconds S <HEY_CSV
  bench dataplane-half SUBJECT http|tunnels <RESULTS
  bench dataplane-check SUBJECT... <RESULTS
  bench dataplane-table <RESULTS
  bench dataplane-pod create|delete -kubeconfig FILE -namespace NS -subject S [-image IMAGE -origin HOST -client CIDR -ports P,... -dir DIR]
`

// errUsage is a command line the command does not take: exit status 2, and the usage.
var errUsage = errors.New("usage")

// commands are the subcommands by name: each gets its arguments, standard input and output.
var commands = map[string]func(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error{
	"elapsed":          runElapsed,
	"k8s-table":        runK8sTable,
	"kvm-table":        runKVMTable,
	"namespace":        runNamespace,
	"objects":          runObjects,
	"raw":              runRaw,
	"dataplane-render": runDataplaneRender,
	"origin":           runOrigin,
	"wait":             runWait,
	"tunnels":          runTunnels,
	"hold":             runHold,
	"hey-summary":      runHeySummary,
	"dataplane-half":   runDataplaneHalf,
	"dataplane-check":  runDataplaneCheck,
	"dataplane-table":  runDataplaneTable,
	"dataplane-pod":    runDataplanePod,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	switch {
	case errors.Is(err, errUsage):
		_, _ = fmt.Fprintf(os.Stderr, "bench: %v\n%s", err, usage)
		os.Exit(2)
	case err != nil:
		_, _ = fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no subcommand", errUsage)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: no subcommand %q", errUsage, args[0])
	}
	return cmd(ctx, args[1:], stdin, stdout)
}
