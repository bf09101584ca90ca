#!/usr/bin/env bash
# check-release.sh [--changelog]
#
# What a tagged release would publish, built and checked here without publishing anything (`make test-static`
# runs it), because a release that a registry rejects is only found out once a tag has been pushed:
#
#   1. actionlint on .github/workflows, with shellcheck on their run: scripts;
#   2. `goreleaser check` on .goreleaser.yml, and no platform in its matrix that Go lacks unless `ignore` names it
#      (goreleaser drops such a pair without a word, so a platform would silently go missing from the release);
#   3. go.mod and go.sum tidy, so the release's `before` hook (`go mod tidy`) would change nothing;
#   4. a snapshot release of one target, the host's, from a copy of .goreleaser.yml with its dist directory in a
#      temporary directory: the binary named as registries expect (terraform-provider-egress_v<version>), static,
#      with the version injected into main.version, and behaving as a plugin when run by hand; the zip, the
#      SHA256SUMS file (the zip and the registry manifest, nothing else) and its signature, made with a throwaway
#      GPG key when gpg is installed, verified as a registry verifies them;
#   5. the working tree (git status, go.mod, go.sum, dist/) the same after as before;
#   6. CHANGELOG.md in the HashiCorp layout, and on a commit tagged v<version>, a dated heading for that version.
#
# --changelog runs only step 6 (seconds, nothing built), for a release workflow to run before it publishes.
#
# Environment: GORELEASER and ACTIONLINT, their paths (default: under EGRESS_CACHE/bin, where `make` builds them;
# EGRESS_CACHE defaults to ~/.cache/terraform-provider-egress).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
goreleaser=${GORELEASER:-$cache/bin/goreleaser}
actionlint=${ACTIONLINT:-$cache/bin/actionlint}
project=terraform-provider-egress

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"
# Each failed check is reported and the others still run, so one run shows everything that is wrong.
failures=0
fail() {
	log "FAIL: $*"
	failures=$((failures + 1))
}

# The HashiCorp changelog layout: `## X.Y.Z (Unreleased)` or `## X.Y.Z (Month D, YYYY)`, sections in capitals, and
# every item naming what it is about, so a reader finds the changes to the type they use.
changelog_sections='^(BREAKING CHANGES|NOTES|FEATURES|ENHANCEMENTS|BUG FIXES):$'
changelog_prefixes='^\* (resource/egress_proxy|data-source/egress_proxy_orphans|data-source/egress_backends|list-resource/egress_proxy|action/egress_proxy_gc|provider): '

# valid_date DATE succeeds when DATE is a real day written as `December 2, 2026`.
valid_date() {
	local d=$1 again
	again=$(date -u -d "$1" '+%B %-d, %Y' 2>/dev/null) && [ "$again" = "$d" ]
}

check_changelog() {
	local f=CHANGELOG.md bad top tag want date tag_day
	bad=$(grep -nE '^## ' "$f" | grep -vE '^[0-9]+:## [0-9]+\.[0-9]+\.[0-9]+ \((Unreleased|[A-Z][a-z]+ [0-9]{1,2}, [0-9]{4})\)$' || true)
	[ -z "$bad" ] || fail "$f: version headings must read '## X.Y.Z (Unreleased)' or '## X.Y.Z (Month D, YYYY)':"$'\n'"$bad"
	bad=$(grep -nE '^[A-Z][A-Z ]*:$' "$f" | cut -d: -f2- | grep -vE "$changelog_sections" || true)
	[ -z "$bad" ] || fail "$f: sections are BREAKING CHANGES, NOTES, FEATURES, ENHANCEMENTS and BUG FIXES, not:"$'\n'"$bad"
	bad=$(grep -nE '^\* ' "$f" | grep -vE "^[0-9]+:${changelog_prefixes#^}" || true)
	[ -z "$bad" ] || fail "$f: every item starts with what it is about (resource/egress_proxy:, provider:, ...):"$'\n'"$bad"

	while read -r date; do
		valid_date "$date" || fail "$f: '$date' in a version heading is not a day written as 'December 2, 2026'"
	done < <(sed -n 's/^## [0-9.]* (\(.*\))$/\1/p' "$f" | grep -v '^Unreleased$' || true)

	top=$(grep -m1 -E '^## ' "$f" || true)
	# Only a commit that carries a version tag must have its release dated: the tag is what the release workflow
	# publishes, and the date is the day of the release.
	if tag=$(git describe --exact-match --tags --match 'v[0-9]*' HEAD 2>/dev/null); then
		want="## ${tag#v} ("
		date=${top#"$want"}
		date=${date%)}
		if [ "${top:0:${#want}}" != "$want" ] || ! valid_date "$date"; then
			fail "$f: HEAD is tagged $tag, so its first heading must be '## ${tag#v} (Month D, YYYY)' with the release day, not '$top'"
		else
			# The heading is written before the tag is made, so its day may be earlier, never later.
			tag_day=$(git for-each-ref --format='%(creatordate:short)' "refs/tags/$tag")
			if [ "$(date -u -d "$date" +%F)" \> "$tag_day" ]; then
				fail "$f: '$top' is dated after the tag $tag ($tag_day)"
			else
				log "changelog: $tag has its dated heading: $top"
			fi
		fi
	else
		log "changelog: HEAD carries no version tag; first heading: $top"
	fi
}

if [ "${1:-}" = --changelog ]; then
	check_changelog
	[ "$failures" -eq 0 ] || exit 1
	exit 0
elif [ $# -gt 0 ]; then
	echo "usage: $0 [--changelog]" >&2
	exit 2
fi

for tool in "$goreleaser" "$actionlint"; do
	[ -x "$tool" ] || {
		log "$tool is missing: make $tool builds it"
		exit 1
	}
done

work=$(mktemp -d "${TMPDIR:-/tmp}/check-release.XXXXXX")
cleanup() {
	# The throwaway key's agent, started by gpg for that home only.
	if [ -d "$work/gnupg" ]; then
		GNUPGHOME=$work/gnupg gpgconf --kill gpg-agent 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# What the working tree looks like, to tell that the checks below left it alone: goreleaser's `before` hook and
# its dist directory are the two ways it could write there (dist/ is ignored by git, so it is looked at on its own).
tree_state() {
	git status --porcelain=v1 --untracked-files=all
	sha256sum go.mod go.sum
	if [ -e dist ]; then ls -ld --time-style=full-iso dist; else echo "no dist/"; fi
}
before=$(tree_state)

# 1. The workflows. actionlint checks run: scripts with shellcheck when it finds one, and says nothing when it
# does not, so its path is given: without shellcheck this check fails rather than shrinks.
if ! shellcheck=$(command -v shellcheck); then
	fail "shellcheck is not installed (scripts/install-deps.sh test installs it): actionlint would skip the workflows' scripts"
elif ! out=$("$actionlint" -shellcheck "$shellcheck" 2>&1); then
	fail "actionlint found problems in .github/workflows:"$'\n'"$out"
fi

# 2. The release configuration.
if ! out=$("$goreleaser" check --verbose .goreleaser.yml 2>&1); then
	fail "goreleaser check:"$'\n'"$out"
fi
# goreleaser lists at debug level the pairs of its goos x goarch matrix that Go does not build, and builds the rest.
invalid=$(sed -n 's/.*skipped invalid build.*target=\([a-z0-9]*\)_\([a-z0-9]*\).*/\1_\2/p' <<<"$out" | sort -u)

# 3. `go mod tidy -diff` says what the release's `before` hook would change, without changing it. The snapshot
# below skips the hook, so that it never rewrites go.mod under a developer's feet.
if ! out=$(go mod tidy -diff 2>&1); then
	fail "go.mod/go.sum are not tidy: the release's 'go mod tidy' hook would change them (run go mod tidy):"$'\n'"$out"
fi

# 4. A snapshot release of the host's platform only: a copy of the configuration whose matrix is the host's pair
# and whose dist directory is temporary. Everything else (names, archive, checksum, signing) is the real config.
goos=$(go env GOOS)
goarch=$(go env GOARCH)
config=$work/goreleaser.yml
if grep -q '^dist:' .goreleaser.yml; then
	fail ".goreleaser.yml sets dist: this script puts the snapshot's dist in a temporary directory itself"
fi
{
	sed -e "s/^    goos: \[.*\]\$/    goos: [$goos]/" -e "s/^    goarch: \[.*\]\$/    goarch: [$goarch]/" .goreleaser.yml
	echo "dist: $work/dist"
} >"$config"
if ! grep -qx "    goos: \[$goos\]" "$config" || ! grep -qx "    goarch: \[$goarch\]" "$config"; then
	fail "could not narrow .goreleaser.yml to $goos/$goarch: its builds' goos and goarch are no longer one-line lists (adjust this script)"
	exit 1
fi

skip=before
if command -v gpg >/dev/null; then
	# A key made for this run only, without a passphrase, in a home of its own: the release signs with the
	# signs section's own arguments, so this exercises them as the release workflow runs them.
	export GNUPGHOME=$work/gnupg
	mkdir -m 700 "$GNUPGHOME"
	gpg --batch --quiet --passphrase '' --quick-gen-key "$project release check <check@invalid>" ed25519 sign never 2>/dev/null
	GPG_FINGERPRINT=$(gpg --batch --with-colons --list-secret-keys 2>/dev/null | awk -F: '$1 == "fpr" { print $10; exit }')
	export GPG_FINGERPRINT
else
	# A release without a verified signature is no release a registry takes (scripts/install-deps.sh test
	# installs gnupg).
	fail "gpg is not installed: the SHA256SUMS signature cannot be made or verified"
	exit 1
fi

start=$(date +%s)
if ! "$goreleaser" release --snapshot --clean --skip="$skip" --config "$config" >"$work/goreleaser.log" 2>&1; then
	cat "$work/goreleaser.log" >&2
	fail "goreleaser release --snapshot failed"
	exit 1
fi
log "snapshot release of $goos/$goarch built in $(($(date +%s) - start)) s"

dist=$work/dist
version=$(jq -r .version "$dist/metadata.json")
binary=${project}_v$version
zip=${project}_${version}_${goos}_${goarch}.zip
sums=${project}_${version}_SHA256SUMS
manifest=${project}_${version}_manifest.json

# The artifacts goreleaser made, by type: exactly one of each, named as registries expect.
artifact_names() { jq -r --arg t "$1" '[.[] | select(.type == $t) | .name] | sort | join(" ")' "$dist/artifacts.json"; }
for want in "Binary:$binary" "Archive:$zip" "Checksum:$sums"; do
	got=$(artifact_names "${want%%:*}")
	[ "$got" = "${want#*:}" ] || fail "${want%%:*}: expected ${want#*:}, goreleaser made '$got'"
done
bin_path=$(jq -r '.[] | select(.type == "Binary") | .path' "$dist/artifacts.json" | head -1)

if [ -x "$bin_path" ]; then
	# Registries serve static binaries that run on any distribution.
	go version -m "$bin_path" | grep -q 'CGO_ENABLED=0' || fail "$binary was not built with CGO_ENABLED=0"
	# -X main.version leaves the version string in the binary only when the variable exists under that name
	# (-trimpath keeps -ldflags out of the embedded build information, so the string is there for no other reason).
	grep -qaF -- "$version" "$bin_path" ||
		fail "$binary does not contain its version $version: -X main.version set nothing (is main.version still the variable?)"
	# Run by hand, without the CLI's handshake cookie, the plugin must log what it is and exit, not serve.
	# The timeout only bounds a binary that would wrongly serve.
	rc=0
	out=$(env -u TF_PLUGIN_MAGIC_COOKIE timeout 20 "$bin_path" 2>&1) || rc=$?
	if [ "$rc" -ne 1 ] || ! grep -q 'This binary is a plugin' <<<"$out"; then
		fail "$binary run by hand exited $rc (want 1, with the plugin notice), printing: $out"
	fi
else
	fail "the binary $binary is missing from the snapshot"
fi

# The zip holds the binary at its root, executable: what the CLI unpacks into its plugin cache.
if [ -f "$dist/$zip" ]; then
	python3 - "$dist/$zip" "$binary" <<'EOF' || fail "$zip does not hold an executable $binary at its root"
import sys, zipfile
entries = {i.filename: i.external_attr >> 16 for i in zipfile.ZipFile(sys.argv[1]).infolist()}
sys.exit(0 if entries.get(sys.argv[2], 0) & 0o111 else 1)
EOF
else
	fail "$zip is missing from the snapshot"
fi

# SHA256SUMS lists the zips and the manifest, with their digests, and nothing else: a registry reads it to find
# both, and a file listed there that is not in the release (or the signature itself) breaks verification.
if [ -f "$dist/$sums" ]; then
	expected=$(
		printf '%s  %s\n' "$(sha256sum <"$dist/$zip" | cut -d' ' -f1)" "$zip"
		printf '%s  %s\n' "$(sha256sum <terraform-registry-manifest.json | cut -d' ' -f1)" "$manifest"
	)
	if [ "$(sort "$dist/$sums")" != "$(sort <<<"$expected")" ]; then
		fail "$sums should list exactly:"$'\n'"$expected"$'\n'"it lists:"$'\n'"$(cat "$dist/$sums")"
	fi
else
	fail "$sums is missing from the snapshot"
fi
if [ "$skip" = before ]; then
	if [ "$(artifact_names Signature)" != "$sums.sig" ]; then
		fail "Signature: expected $sums.sig, goreleaser made '$(artifact_names Signature)'"
	elif ! out=$(gpg --batch --verify "$dist/$sums.sig" "$dist/$sums" 2>&1); then
		fail "$sums.sig does not verify $sums (the registry and the CLI would reject the release):"$'\n'"$out"
	fi
fi

# The manifest tells the registry which plugin protocol the provider speaks: 6, as main.go serves it.
jq -e '.version == 1 and .metadata.protocol_versions == ["6.0"]' terraform-registry-manifest.json >/dev/null ||
	fail "terraform-registry-manifest.json should declare protocol_versions [\"6.0\"]"
# The manifest goes into the release under the name SHA256SUMS lists only if both sections name it alike.
templates=$(grep -A1 -E '^ *- glob: terraform-registry-manifest.json$' .goreleaser.yml | grep -cE "name_template: '\{\{ \.ProjectName \}\}_\{\{ \.Version \}\}_manifest.json'$" || true)
[ "$templates" = 2 ] || fail ".goreleaser.yml: the checksum and release extra_files should both name the manifest '{{ .ProjectName }}_{{ .Version }}_manifest.json'"

# Back to step 2: every pair Go lacks must be in the config's ignore list (read from goreleaser's own copy of the
# configuration, which writes it in one layout), or the release misses a platform the config seems to promise.
ignored=$(awk '
	/^    ignore:$/ { inside = 1; next }
	inside && /^    [^ -]/ { inside = 0 }
	inside && /- goos:/ { os = $NF }
	inside && /goarch:/ { arch = $NF; gsub(/["\047]/, "", arch); print os "_" arch }
' "$dist/config.yaml" | sort -u)
missing=$(comm -23 <(echo "$invalid") <(echo "$ignored") | grep . || true)
[ -z "$missing" ] || fail ".goreleaser.yml builds pairs Go does not have, which goreleaser skips without a word: add them to ignore: $(echo "$missing" | tr '\n' ' ')"

# 5. Nothing written in the working tree.
after=$(tree_state)
if [ "$before" != "$after" ]; then
	fail "the working tree changed during the check:"$'\n'"$(diff <(echo "$before") <(echo "$after") || true)"
fi

# 6. The changelog.
check_changelog

if [ "$failures" -gt 0 ]; then
	log "$failures check(s) failed"
	exit 1
fi
log "ok: $binary, $zip, $sums$([ "$skip" = before ] && echo " and its signature") as a registry expects them; workflows and changelog checked"
