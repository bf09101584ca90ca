# shellcheck shell=bash
# debcache.sh, sourced by the image builds: debootstrap's package cache, kept between builds under the project's
# cache, but never used by two builds at once. Two debootstraps on one --cache-dir break each other (one removes or
# rewrites a package the other is reading or extracting); a cold make test builds the VM image and the Kubernetes
# image side by side, and failed so. Each build works on a private copy and gives back what it downloaded.

# debcache_take SHARED PRIVATE copies the shared cache's packages into PRIVATE. A package that goes away meanwhile
# (another build's clean-up of old ones) is only downloaded again.
debcache_take() {
	mkdir -p "$1" "$2"
	find "$1" -maxdepth 1 -name '*.deb' -exec cp -t "$2" {} + 2>/dev/null || true
}

# debcache_give PRIVATE SHARED adds to the shared cache the packages of PRIVATE it lacks, each written under a
# temporary name and renamed, so that a build taking the cache at that moment never copies half a file.
debcache_give() {
	local f name
	mkdir -p "$2"
	for f in "$1"/*.deb; do
		[[ -e $f ]] || continue
		name=${f##*/}
		[[ -e $2/$name ]] && continue
		cp "$f" "$2/.$name.$$" && mv -f "$2/.$name.$$" "$2/$name"
	done
}
