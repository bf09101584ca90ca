#!/usr/bin/env bash
# build-k8s.sh: builds tools/k8scluster, the one binary holding etcd, the Kubernetes servers and the
# NetworkPolicy controller (kube-router's) the kubernetes backend's acceptance tests run a cluster with
# (scripts/k8s-env.sh). The binary is cached
# under $HOME/.cache, never in the repository, and rebuilt only when its source changed: a stamp beside it
# holds the hash of the module's files and the Go version it was built with.
#
# The cold build is long (about 12 minutes on 2 cores, 3.4 GB of memory, 4 GB of build cache); a rebuild
# with a warm Go build cache only relinks. Prints the binary's path on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC="$ROOT/tools/k8scluster"
OUT_DIR=${EGRESS_K8S_BIN_DIR:-$HOME/.cache/terraform-provider-egress/k8s}
BIN="$OUT_DIR/k8scluster"
STAMP="$BIN.stamp"
# The Kubernetes version the module requires; the link flags below make every component report it.
KUBE_VERSION=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$SRC/go.mod")
# The commit of that release is not in the module; the field stays as this marker instead of empty.
KUBE_COMMIT=module-${KUBE_VERSION}

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

source_hash() {
	{
		go version
		(cd "$SRC" && sha256sum go.mod go.sum ./*.go)
		sha256sum <"$0"
	} | sha256sum | cut -d' ' -f1
}

want=$(source_hash)
if [ -x "$BIN" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
	echo "$BIN"
	exit 0
fi

mkdir -p "$OUT_DIR"
major=${KUBE_VERSION#v}
major=${major%%.*}
minor=${KUBE_VERSION#v*.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitCommit=$KUBE_COMMIT -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

log "building k8scluster $KUBE_VERSION into $BIN (a cold build takes 10+ minutes)"
start=$(date +%s)
# Two jobs: the machine has two cores, shared; EGRESS_K8S_BUILD_JOBS lowers it.
(cd "$SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -p "${EGRESS_K8S_BUILD_JOBS:-2}" -trimpath \
	-ldflags "$ldflags" -o "$BIN.tmp" .)
mv "$BIN.tmp" "$BIN"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy network-policy; do
	ln -sf k8scluster "$OUT_DIR/$c"
done
echo "$want" >"$STAMP"
log "built in $(($(date +%s) - start)) s"
echo "$BIN"
