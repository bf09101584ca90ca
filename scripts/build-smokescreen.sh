#!/usr/bin/env bash
# build-smokescreen.sh: builds Stripe's Smokescreen, one of the egress proxies scripts/bench-dataplane.sh
# measures this project's against, from the Go module tools/smokescreen requires (a module of its own, so the
# provider's go.mod does not carry Smokescreen's dependencies). The binary is cached under $HOME/.cache, never
# in the repository, and rebuilt only when tools/smokescreen or the Go version changed: a stamp beside it holds
# their hash. Prints the binary's path on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC="$ROOT/tools/smokescreen"
OUT_DIR=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}/bin
BIN="$OUT_DIR/smokescreen"
STAMP="$BIN.stamp"

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

want=$({
	go version
	(cd "$SRC" && sha256sum go.mod go.sum)
	sha256sum <"$0"
} | sha256sum | cut -d' ' -f1)
if [ -x "$BIN" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
	echo "$BIN"
	exit 0
fi

mkdir -p "$OUT_DIR"
version=$(cd "$SRC" && go list -m -f "{{.Version}}" github.com/stripe/smokescreen)
log "building Smokescreen $version into $BIN"
(cd "$SRC" && CGO_ENABLED=0 go build -trimpath -o "$BIN.tmp" github.com/stripe/smokescreen)
mv "$BIN.tmp" "$BIN"
echo "$want" >"$STAMP"
echo "$BIN"
