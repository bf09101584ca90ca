#!/usr/bin/env bash
# install-deps.sh [quickstart|test]
#
# The Debian packages a flow needs beyond what its environment script installs (libvirt's by
# scripts/libvirt-env.sh, the cluster's by scripts/k8s-env.sh, the image tools by the image builds), through
# scripts/install-packages.sh, which starts and enables no service. `quickstart` (the default) is what
# `make quickstart` needs: curl and Python for the demo's web server. `test` adds what the tests run for real:
# git (the release check's goreleaser reads the clone's history; a machine may have been given the clone as files),
# iproute2 and procps (ip, ss, ps, pgrep, sysctl: of priority important, so a minimal Debian lacks them),
# squid-openssl (the Squid build the proxy image runs) for the data-plane tests, nftables (nft: the proxyconf
# tests load the backstop ruleset in a network namespace of their own, as the guest loads it), apache2-utils for htpasswd,
# genisoimage to read back seed ISOs, jq, openssh-server for the kvm backend's ssh transport test (its sshd is
# started by the test on a loopback port, never as the machine's service) and tcpdump for the tests that look
# at the bytes between client and proxy; gcc and libc6-dev because the tests run under Go's race detector,
# which needs cgo; shellcheck, which test-static and actionlint run on the scripts; pyflakes3, which test-static
# runs on the aws guest agent's Python; gpg, which signs and checks the snapshot release's checksums
# (scripts/check-release.sh); and for the data-plane benchmark's short run (scripts/bench-dataplane.sh, which
# internal/cmd/bench's TestDataplaneShortRun runs for a second a measurement) its load generators wrk and hey
# and tinyproxy, one of the proxies it measures this project's against; mtail, prometheus (with promtool) and
# prometheus-squid-exporter, which internal/metrics runs for real on the proxy's access log and cache manager.
# Quick when everything is present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
packages=(curl python3 ca-certificates)
case "${1:-quickstart}" in
quickstart) ;;
test) packages+=(git iproute2 procps squid-openssl nftables apache2-utils genisoimage jq openssh-server tcpdump gcc libc6-dev shellcheck pyflakes3 gnupg wrk hey tinyproxy mtail prometheus prometheus-squid-exporter) ;;
*)
	echo "usage: $0 [quickstart|test]" >&2
	exit 2
	;;
esac
exec "$here/install-packages.sh" "${packages[@]}"
