package kvm

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

const gib = 1 << 30

// poolInfo is an active pool's handle and free space.
type poolInfo struct {
	pool      libvirt.StoragePool
	available uint64
}

// activePool looks the pool up and checks it can take volumes. A missing or stopped pool is a configuration
// problem of the host: Permanent, never NotFound (that class would say the proxy is gone).
func activePool(l api, name string) (poolInfo, error) {
	pool, err := l.StoragePoolLookupByName(name)
	if isCode(err, libvirt.ErrNoStoragePool) {
		return poolInfo{}, missingOnHost(fmt.Sprintf("Create storage pool %q on the host (virsh pool-define-as, then pool-start and pool-autostart), "+
			"or set kvm.pool on the proxy, or pool on the provider's kvm block, to a pool that exists, then apply again.", name),
			fmt.Errorf("storage pool %q does not exist on the host: %w", name, err))
	}
	if err != nil {
		return poolInfo{}, err
	}
	state, _, _, avail, err := l.StoragePoolGetInfo(pool)
	if err != nil {
		return poolInfo{}, err
	}
	if libvirt.StoragePoolState(state) != libvirt.StoragePoolRunning {
		return poolInfo{}, backend.Permanent("", "storage pool %q is not active: start it (virsh pool-start %s)", name, name)
	}
	return poolInfo{pool: pool, available: avail}, nil
}

// baseVolume is what the root overlay needs of its backing volume.
type baseVolume struct {
	path     string
	format   string
	capacity uint64
}

func lookupBase(l api, pool libvirt.StoragePool, name string) (baseVolume, error) {
	vol, err := l.StorageVolLookupByName(pool, name)
	if isCode(err, libvirt.ErrNoStorageVol) {
		return baseVolume{}, missingOnHost(fmt.Sprintf("Upload the base image into pool %q as %q (virsh vol-upload), or set kvm.base_volume "+
			"or kvm.image_file or kvm.image_url on the proxy, or base_volume on the provider's kvm block, to one that exists, then apply again.", pool.Name, name),
			fmt.Errorf("base volume %q does not exist in pool %q: %w", name, pool.Name, err))
	}
	if err != nil {
		return baseVolume{}, err
	}
	s, err := l.StorageVolGetXMLDesc(vol, 0)
	if err != nil {
		return baseVolume{}, err
	}
	var v libvirtxml.StorageVolume
	if err := v.Unmarshal(s); err != nil {
		return baseVolume{}, fmt.Errorf("reading base volume %q: %w", name, err)
	}
	b := baseVolume{format: "raw"}
	if v.Target != nil {
		b.path = v.Target.Path
		if v.Target.Format != nil && v.Target.Format.Type != "" {
			b.format = v.Target.Format.Type
		}
	}
	if v.Capacity != nil {
		b.capacity = v.Capacity.Value
	}
	return b, nil
}

// volRef names a volume for the calls that take one. The storage driver resolves a volume by its pool's
// and its own name (virStorageVolDefFromVol), so no lookup call is needed to get a handle.
func volRef(pool, name string) libvirt.StorageVol { return libvirt.StorageVol{Pool: pool, Name: name} }

// createSeed makes the seed volume and streams the ISO into it: the upload goes through the libvirt
// connection, so it works on a remote host as well as on this one. A volume of that name already there is
// a leftover: clearLeftover decides whether it may go.
func createSeed(l api, pool libvirt.StoragePool, name string, img []byte, clearLeftover func() error) error {
	vol := libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(len(img))},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
	}
	s, err := vol.Marshal()
	if err != nil {
		return err
	}
	v, err := createVolume(l, pool, s, clearLeftover)
	if err != nil {
		return err
	}
	if err := l.StorageVolUpload(v, bytes.NewReader(img), 0, uint64(len(img)), 0); err != nil {
		// An empty seed says nothing about whose it is: remove it now rather than leave a puzzle, and say so
		// when that fails too, since no listing can attribute it later.
		if derr := deleteVolumeAfterStream(l, pool.Name, name); derr != nil { // the failed upload may hold it a moment
			return fmt.Errorf("%w (and the empty seed volume %s could not be removed: %w; remove it with virsh vol-delete)", err, name, derr)
		}
		return err
	}
	return nil
}

// createRoot makes the root disk as a qcow2 overlay on the base volume: nothing is copied, and the overlay's
// capacity is the proxy's disk size. A root volume of that name already there is a leftover of this proxy's
// own (its seed, made first, was just found to be ours or absent): it is replaced.
func createRoot(l api, pool libvirt.StoragePool, name string, base baseVolume, capacity uint64) error {
	vol := libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: capacity},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{
			Path:   base.path,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: base.format},
		},
	}
	s, err := vol.Marshal()
	if err != nil {
		return err
	}
	_, err = createVolume(l, pool, s, func() error { return deleteVolume(l, pool.Name, name) })
	return err
}

// createVolume creates from x; when the name is taken, clearLeftover removes the old volume (or refuses) and
// the create is tried once more. Trying first keeps the usual case, no leftover, to one call.
func createVolume(l api, pool libvirt.StoragePool, x string, clearLeftover func() error) (libvirt.StorageVol, error) {
	v, err := l.StorageVolCreateXML(pool, x, 0)
	if !isCode(err, libvirt.ErrStorageVolExist) {
		return v, err
	}
	if err := clearLeftover(); err != nil {
		return v, err
	}
	return l.StorageVolCreateXML(pool, x, 0)
}

// deleteVolume removes a volume by name; one that is already gone is not an error.
func deleteVolume(l api, pool, name string) error {
	err := l.StorageVolDelete(volRef(pool, name), 0)
	if isCode(err, libvirt.ErrNoStorageVol) {
		return nil
	}
	return err
}

// deleteVolumeAfterStream deletes a volume that a stream of ours has just read: libvirt lets go of a volume a
// stream holds a moment after the stream's last byte (its I/O helper ends on its own), and until then refuses a
// delete with "volume ... is still in use" (VIR_ERR_OPERATION_INVALID). A create retried after libvirtd restarted
// mid-apply met that in a cold run of make test on a loaded machine, and failed as Permanent (in clearLeftoverSeed,
// and later in Delete of a proxy without a domain, a create's give-back). The delete is tried
// again until the hold ends, for at most streamHoldLimit; nothing tells when it does.
func deleteVolumeAfterStream(l api, pool, name string) error {
	deadline := time.Now().Add(streamHoldLimit)
	for {
		err := deleteVolume(l, pool, name)
		if !stillInUse(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(streamHoldPoll)
	}
}

// How long a stream's hold on a volume may outlast the stream, and how often to look whether it has ended.
const (
	streamHoldLimit = 30 * time.Second
	streamHoldPoll  = 100 * time.Millisecond
)

// stillInUse reports whether err is libvirt refusing a volume operation while another job (a stream) holds
// the volume.
func stillInUse(err error) bool {
	return isCode(err, libvirt.ErrOperationInvalid) && strings.Contains(err.Error(), "still in use")
}

// readSeedIdentity downloads a seed volume and reads the proxy metadata stored on it.
func readSeedIdentity(l api, vol libvirt.StorageVol) (metadata, error) {
	var buf bytes.Buffer
	if err := l.StorageVolDownload(vol, &buf, 0, seedReadLimit, 0); err != nil {
		return metadata{}, err
	}
	return seedIdentity(buf.Bytes())
}
