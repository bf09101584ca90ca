package kvm

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// liveProjectImage is the project's proxy image (EGRESS_TEST_IMAGE), which these tests serve over HTTP on
// loopback: the test process downloads it, as the provider would, and streams it into the test pool.
func liveProjectImage(t *testing.T) (string, imageInfo) {
	t.Helper()
	path := os.Getenv("EGRESS_TEST_IMAGE")
	if path == "" {
		t.Skip("EGRESS_TEST_IMAGE is not set: build the image (scripts/build-image.sh) and set it to the qcow2's path")
	}
	info, err := inspectImage(ctxFor(t, 5*time.Minute), path)
	if err != nil {
		t.Fatal(err)
	}
	return path, info
}

// urlImageVolumesIn lists the pool's volumes named for the image whose SHA-256 is sum.
func urlImageVolumesIn(t *testing.T, b *Backend, sum string) []string {
	t.Helper()
	return poolVolumesNamed(t, b, imageVolumePrefix+sum[:16]+"-")
}

// removeURLImageVolumes deletes the image's URL volumes now (an earlier run's) and when the test ends:
// the provider never deletes image volumes, and these tests count downloads into an empty pool.
func removeURLImageVolumes(t *testing.T, b *Backend, sum string) {
	t.Helper()
	remove := func() {
		for _, name := range urlImageVolumesIn(t, b, sum) {
			inspect(t, b, func(l api) error { return deleteVolume(l, b.hosts[liveHost].Pool, name) })
		}
	}
	remove()
	t.Cleanup(remove)
}

func urlSpec(owner, url, sum string) backend.Spec {
	spec := liveSpec(owner)
	optionsOf(spec.Placement).ImageURL = url
	optionsOf(spec.Placement).ImageSHA256 = sum
	optionsOf(spec.Placement).DiskGiB = 0
	return spec
}

// resolvedPlacement is the placement Create resolves spec to, which the tests hand to placeImageURL to make
// the image ready as Create would, without booting a proxy.
func resolvedPlacement(t *testing.T, b *Backend, spec backend.Spec) placement {
	t.Helper()
	p, err := resolvePlacement(spec, b.hosts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// createFails creates spec, which must fail with class and an error that says every one of parts, and returns
// the error. How long the failure took is logged: a download that cannot succeed should end the apply early.
func createFails(t *testing.T, b *Backend, spec backend.Spec, class backend.Class, parts ...string) error {
	t.Helper()
	cleanupProxy(t, b, spec.Name)
	start := time.Now()
	_, err := b.Create(ctxFor(t, 5*time.Minute), spec)
	t.Logf("Create failed in %s: %v", time.Since(start).Round(time.Millisecond), err)
	if backend.ClassOf(err) != class {
		t.Fatalf("Create = %v, want %s", err, class)
	}
	for _, part := range parts {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error does not say %q", part)
		}
	}
	return err
}

// checkNothingLeftInPool checks that a failed Create of spec left neither a volume of the image whose SHA-256
// is sum nor one of the proxy's, and says whether that holds, for a test that goes on only from an empty pool.
func checkNothingLeftInPool(t *testing.T, b *Backend, spec backend.Spec, sum string) bool {
	t.Helper()
	ok := true
	if vols := urlImageVolumesIn(t, b, sum); len(vols) != 0 {
		t.Errorf("image volumes left: %v", vols)
		ok = false
	}
	if vols := volumesOf(t, b, spec.Name); len(vols) != 0 {
		t.Errorf("proxy volumes left: %v", vols)
		ok = false
	}
	return ok
}

// checkImageVolume checks the pool's volume name is the image file, byte for byte, complete as the protocol
// reads it, and returns its description.
func checkImageVolume(t *testing.T, b *Backend, name, path string, info imageInfo) libvirtxml.StorageVolume {
	t.Helper()
	v := volumeXML(t, b, name)
	if v.Physical == nil || v.Physical.Value != uint64(info.size) || v.Target.Format.Type != info.format || v.Capacity.Value != info.capacity {
		t.Errorf("image volume = physical %v format %v capacity %v; want the image's %d bytes, %s, %d", v.Physical, v.Target.Format, v.Capacity, info.size, info.format, info.capacity)
	}
	if out, err := exec.Command("cmp", path, v.Target.Path).CombinedOutput(); err != nil {
		t.Errorf("image volume differs from the image: %v %s", err, out)
	}
	return v
}

// Ten proxies' images made ready side by side, through the call Create makes, cost one download; a proxy
// created afterwards makes no request at all and runs on that volume.
func TestLiveImageURLDownloadedOnceForTenProxies(t *testing.T) {
	b, cnt := countingLiveBackend(t)
	path, info := liveProjectImage(t)
	srv := serveImage(t, path)
	removeURLImageVolumes(t, b, info.sum)
	name := urlVolumeName(info.sum, info.size, info.format)

	spec := urlSpec(testOwner(), srv.URL+"/debian-12-squid.qcow2", info.sum)
	p := resolvedPlacement(t, b, spec)
	cnt.take()
	start := time.Now()
	placed, errs := sideBySide(10, func(int) (placement, error) {
		return b.placeImageURL(ctxFor(t, 10*time.Minute), b.conns[liveHost], p)
	})
	t.Logf("ten proxies' image ready in %s: %d bytes downloaded and streamed into the pool", time.Since(start).Round(time.Millisecond), info.size)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("placing the image, call %d: %v", i, err)
		}
		if placed[i].BaseVolume != name || placed[i].base == nil || placed[i].base.format != formatQCOW2 {
			t.Errorf("call %d placed base volume %s (%+v), want %s", i, placed[i].BaseVolume, placed[i].base, name)
		}
	}
	if n := srv.gets.Load(); n != 1 {
		t.Errorf("GETs = %d, want 1 for ten proxies", n)
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 1 {
		t.Errorf("StorageVolUpload calls = %d, want 1", per["StorageVolUpload"])
	}
	if vols := urlImageVolumesIn(t, b, info.sum); len(vols) != 1 || vols[0] != name {
		t.Fatalf("image volumes = %v, want exactly %s", vols, name)
	}
	checkImageVolume(t, b, name, path, info)

	// A proxy made now: its image is in the pool, so the server is not asked at all.
	cleanupProxy(t, b, spec.Name)
	if _, err := b.Create(ctxFor(t, 3*time.Minute), spec); err != nil {
		t.Fatal(err)
	}
	if n := srv.gets.Load(); n != 1 {
		t.Errorf("GETs after creating a proxy = %d, want still 1", n)
	}
	if root := volumeXML(t, b, rootVolumeName(spec.Name)); root.BackingStore == nil || !strings.HasSuffix(root.BackingStore.Path, "/"+name) {
		t.Errorf("root overlay backs on %+v, want the image volume %s", root.BackingStore, name)
	}
	if err := b.Delete(ctxFor(t, time.Minute), idOf(spec)); err != nil {
		t.Fatal(err)
	}
	if vols := urlImageVolumesIn(t, b, info.sum); len(vols) != 1 {
		t.Errorf("image volumes after the proxy's delete = %v, want the image kept", vols)
	}
}

// A server whose image is not the one image_sha256 names: Permanent, saying both checksums and the URL,
// and nothing left in the pool or on local disk.
func TestLiveImageURLChecksumMismatchLeavesNothing(t *testing.T) {
	b := liveBackend(t)
	path, info := liveProjectImage(t)
	srv := serveImage(t, path)
	wrongSum := sha256.Sum256([]byte(uuid.NewString()))
	wrong := hex.EncodeToString(wrongSum[:])
	removeURLImageVolumes(t, b, wrong)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	spec := urlSpec(testOwner(), srv.URL+"/debian-12-squid.qcow2", wrong)
	err := createFails(t, b, spec, backend.ClassPermanent, srv.URL+"/debian-12-squid.qcow2", "expected "+wrong, "sha256 is "+info.sum)
	if !strings.Contains(backend.AdviceOf(err), "kvm.image_sha256") {
		t.Errorf("advice %q does not say what to check", backend.AdviceOf(err))
	}
	checkNothingLeftInPool(t, b, spec, wrong)
	if _, found := domainState(t, b, spec.Name); found {
		t.Errorf("domain %s was made", spec.Name)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("files left in TMPDIR: %v", left)
	}
	if n := srv.gets.Load(); n != 1 {
		t.Errorf("GETs = %d, want 1", n)
	}
}

// A server that drops the connection half way: Transient, saying where it broke off, nothing left in the
// pool; the next attempt downloads the image whole.
func TestLiveImageURLBrokenDownloadLeavesNothing(t *testing.T) {
	b := liveBackend(t)
	path, info := liveProjectImage(t)
	srv := serveImage(t, path)
	cut := srv.cutAfter(info.size / 2)
	srv.fault = func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			cut(w)
			return true
		}
		return false
	}
	removeURLImageVolumes(t, b, info.sum)

	spec := urlSpec(testOwner(), srv.URL+"/debian-12-squid.qcow2", info.sum)
	err := createFails(t, b, spec, backend.ClassTransient, srv.URL+"/debian-12-squid.qcow2", "broke off after", " of "+strconv.FormatInt(info.size, 10)+" bytes")
	if backend.AdviceOf(err) == "" {
		t.Errorf("error %q comes without advice", err)
	}
	if !checkNothingLeftInPool(t, b, spec, info.sum) {
		t.FailNow() // the next attempt must start from an empty pool to show it downloads the image whole
	}

	// The next attempt (the provider's retry, or the next apply), without a proxy to boot: the image whole.
	p := resolvedPlacement(t, b, spec)
	start := time.Now()
	p, err = b.placeImageURL(ctxFor(t, 5*time.Minute), b.conns[liveHost], p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second attempt downloaded the image in %s", time.Since(start).Round(time.Millisecond))
	if n := srv.gets.Load(); n != 2 {
		t.Errorf("GETs = %d, want 2", n)
	}
	checkImageVolume(t, b, p.BaseVolume, path, info)
}

// What a download killed half way leaves (the process gone, the volume of the final name half written) is
// never taken for the image on the real pool: it is waited for while it might grow, then deleted and the
// image downloaded again.
func TestLiveImageURLAbandonedDownloadIsNotUsed(t *testing.T) {
	b, cnt := countingLiveBackend(t)
	b.imageStall = 2 * time.Second // how long the dead downloader's volume is watched: the test's to shorten
	path, info := liveProjectImage(t)
	srv := serveImage(t, path)
	removeURLImageVolumes(t, b, info.sum)
	name := urlVolumeName(info.sum, info.size, info.format)
	pool := b.hosts[liveHost].Pool
	c := b.conns[liveHost]

	// The dead process's half: created and streamed as a download does, ended early without an error.
	vol, created, err := createImageVolume(ctxFor(t, time.Minute), c, pool, name, info, "test")
	if err != nil || !created {
		t.Fatalf("creating the half-written volume: %v, created %v", err, created)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	half := uint64(info.size / 2)
	inspect(t, b, func(l api) error { return l.StorageVolUpload(vol, io.LimitReader(f, int64(half)), 0, half, 0) })
	var vols []urlImageVolume
	inspect(t, b, func(l api) error { vols, err = readURLImageVolumes(l, pool, info.sum); return err })
	if len(vols) != 1 || vols[0].complete || vols[0].size >= uint64(info.size) {
		t.Fatalf("half-written volume reads as %+v, want one incomplete volume", vols)
	}

	p := resolvedPlacement(t, b, urlSpec(testOwner(), srv.URL+"/debian-12-squid.qcow2", info.sum))
	cnt.take()
	start := time.Now()
	if p, err = b.placeImageURL(ctxFor(t, 5*time.Minute), c, p); err != nil {
		t.Fatal(err)
	}
	t.Logf("abandoned volume replaced and the image downloaded in %s", time.Since(start).Round(time.Millisecond))
	if _, per := cnt.take(); per["StorageVolDelete"] != 1 || srv.gets.Load() != 1 {
		t.Errorf("calls %v, GETs %d: want the abandoned volume deleted and one download", per, srv.gets.Load())
	}
	checkImageVolume(t, b, p.BaseVolume, path, info)
}

// Downloads of one image by several processes (here, calls that bypass the process's shared flight) meet in
// the pool: each asks the server, one creates the volume and streams the image, the others drop their
// download after its first bytes, wait for that volume and use it.
func TestLiveImageURLProcessesShareThePool(t *testing.T) {
	b, cnt := countingLiveBackend(t)
	path, info := liveProjectImage(t)
	srv := serveImage(t, path)
	removeURLImageVolumes(t, b, info.sum)
	src, err := parseImageSource(srv.URL+"/debian-12-squid.qcow2", info.sum)
	if err != nil {
		t.Fatal(err)
	}
	cnt.take()
	placed, errs := sideBySide(5, func(int) (placedImage, error) {
		return b.placeURLImage(ctxFor(t, 5*time.Minute), b.conns[liveHost], b.hosts[liveHost].Pool, src)
	})
	name := urlVolumeName(info.sum, info.size, info.format)
	for i, err := range errs {
		if err != nil || placed[i].name != name {
			t.Errorf("process %d: %s, %v; want %s", i, placed[i].name, err, name)
		}
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 1 || per["StorageVolDelete"] != 0 {
		t.Errorf("calls %v: want the image streamed once and nothing deleted", per)
	}
	checkImageVolume(t, b, name, path, info)
}
