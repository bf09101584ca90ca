# log.sh: sourced, not run. The one way the scripts report progress: a line on stderr with the time and the
# script's name, so that the output of the test groups make runs side by side reads in order and says whose
# it is. A script whose file name would mislead sets LOG_NAME before sourcing this.
# shellcheck shell=bash

: "${LOG_NAME:=$(basename "$0" .sh)}"

# log MESSAGE...
log() { printf '%s %s: %s\n' "$(date +%T)" "$LOG_NAME" "$*" >&2; }

# die MESSAGE...: log it, then exit 1.
die() {
	log "$*"
	exit 1
}
