package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// Putting an image file into a pool, safely across processes: libvirt has neither a rename nor metadata on
// volumes, so the protocol rests on two facts. The volume's name is the content's hash, and a volume is
// complete when its physical size (libvirt's <physical>: the file's size in a file-based pool) equals the
// image file's. An upload writes sequentially from offset 0 into a volume that starts smaller (raw: empty;
// qcow2: the bare header qemu-img writes), so the size reaches the file's only with the last byte, and the
// uploader checks the bytes it streams against the hash before letting the stream finish.
//
//  1. Read the volume. Complete: use it.
//  2. Missing: create it. Created: upload; an upload that fails deletes the volume. "Already exists":
//     another process is uploading, go to 3.
//  3. Incomplete: poll its size. Growing: wait. Complete: use it. Gone (that upload failed): back to 2.
//     Not grown for imageStall: its uploader died; delete it and go back to 2.
//
// Within one process, creates of the same image into the same pool of the same host share one flight, so
// they cause one upload. Every wait is bounded by the caller's ctx. The protocol assumes a file-based pool
// (dir, fs, netfs), where a volume's physical size grows with what is written.
var imageFlights flights[baseVolume]

// imageStall is how long an incomplete image volume may stop growing before it is taken as abandoned.
const defaultImageStall = 30 * time.Second

// ensureImage returns the image's volume in pool as a base for overlays, uploading it first if needed.
func (b *Backend) ensureImage(ctx context.Context, c *conn, pool string, img imageInfo) (baseVolume, error) {
	key := c.host.URI + "\x00" + pool + "\x00" + img.sum
	return imageFlights.do(ctx, key, func(ctx context.Context) (baseVolume, error) {
		return b.placeImage(ctx, c, pool, img)
	})
}

func (b *Backend) placeImage(ctx context.Context, c *conn, pool string, img imageInfo) (baseVolume, error) {
	name := img.volumeName()
	var g growth
	for {
		var st imageVolState
		err := c.do(ctx, func(l api) error {
			var err error
			st, err = readImageVolume(l, pool, name, img)
			return err
		})
		if err != nil {
			return baseVolume{}, err
		}
		switch {
		case st.complete:
			return st.base, nil
		case st.missing:
			created, err := b.uploadImage(ctx, c, pool, img)
			if err != nil {
				return baseVolume{}, err
			}
			if !created { // someone else's upload started meanwhile: watch it from now
				g = growth{}
				// libvirt reads a volume it is still building as missing: poll, do not spin on it.
				if err := sleepCtx(ctx, b.pollInterval); err != nil {
					return baseVolume{}, err
				}
			}
			continue
		case g.stalled(st.size, b.imageStall):
			// The uploader is gone. Deleting may also meet a slow one still writing: its upload then fails
			// and, as a Transient error, is retried.
			err := c.do(ctx, func(l api) error { return deleteVolume(l, pool, name) })
			if err != nil {
				return baseVolume{}, err
			}
			g = growth{}
			continue
		}
		if err := sleepCtx(ctx, b.pollInterval); err != nil {
			return baseVolume{}, fmt.Errorf("waiting for image volume %s (%d of %d bytes) that another upload is writing: %w", name, st.size, img.size, err)
		}
	}
}

// growth tells an image volume that another process still writes from one whose writer is gone: the size
// it was last seen at, and since when.
type growth struct {
	size  uint64
	since time.Time
}

// stalled records size and reports whether the volume has kept it for longer than limit.
func (g *growth) stalled(size uint64, limit time.Duration) bool {
	if g.since.IsZero() || size != g.size {
		g.size, g.since = size, time.Now()
		return false
	}
	return time.Since(g.since) > limit
}

// imageVolState is an image volume as the pool shows it.
type imageVolState struct {
	missing, complete bool
	size              uint64
	base              baseVolume
}

// readImageVolume costs one call: the volume is named by pool and name, with no lookup first.
func readImageVolume(l api, pool, name string, img imageInfo) (imageVolState, error) {
	s, err := l.StorageVolGetXMLDesc(volRef(pool, name), 0)
	if isCode(err, libvirt.ErrNoStorageVol) {
		return imageVolState{missing: true}, nil
	}
	if isCode(err, libvirt.ErrNoStoragePool) {
		return imageVolState{}, backend.Permanent("", "storage pool %q does not exist on the host: %v", pool, err)
	}
	if err != nil {
		return imageVolState{}, err
	}
	var v libvirtxml.StorageVolume
	if err := v.Unmarshal(s); err != nil {
		return imageVolState{}, fmt.Errorf("reading image volume %q: %w", name, err)
	}
	st := imageVolState{base: baseVolume{format: formatRaw}}
	if v.Physical != nil {
		st.size = v.Physical.Value
	}
	if v.Target != nil {
		st.base.path = v.Target.Path
		if v.Target.Format != nil && v.Target.Format.Type != "" {
			st.base.format = v.Target.Format.Type
		}
	}
	if v.Capacity != nil {
		st.base.capacity = v.Capacity.Value
	}
	st.complete = st.size == uint64(img.size) && st.base.format == img.format
	return st, nil
}

// uploadImage creates the image volume and streams the file into it. It reports false, and does nothing,
// when the volume exists already (another process made it first).
func (b *Backend) uploadImage(ctx context.Context, c *conn, pool string, img imageInfo) (bool, error) {
	name := img.volumeName()
	f, err := os.Open(img.path)
	if err != nil {
		return false, backend.NewError(backend.ClassPermanent, "", fmt.Errorf("image file: %w", err))
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	vol, created, err := createImageVolume(ctx, c, pool, name, img, "image file "+img.path)
	if err != nil || !created {
		return false, err
	}
	if err := streamImage(ctx, c, pool, vol, f, img); err != nil {
		var digest *digestError
		var short *shortError
		switch {
		case errors.As(err, &digest):
			err = fmt.Errorf("image file changed since it was hashed: %w", err)
		case errors.As(err, &short):
			err = fmt.Errorf("image file shrank while being uploaded: %w", err)
		}
		return false, fmt.Errorf("uploading image file %s to volume %s: %w", img.path, name, err)
	}
	return true, nil
}

// createImageVolume creates an image volume named name for img, whose source (an image file, a URL) the
// errors name. It reports false, and creates nothing, when a volume of that name exists already.
func createImageVolume(ctx context.Context, c *conn, pool, name string, img imageInfo, source string) (libvirt.StorageVol, bool, error) {
	var vol libvirt.StorageVol
	exists := false
	// The volume is created under a ctx of its own: a caller that gives up while the call is on its way
	// must not leave a volume nobody deletes. Once it is known created, the caller's ctx ending makes the
	// stream that follows fail, which deletes it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), libvirtconn.CallGrace)
	defer cancel()
	err := c.do(cctx, func(l api) error {
		p, err := activePool(l, pool)
		if err != nil {
			return err
		}
		if uint64(img.size) > p.available {
			return backend.Quota("", "pool %q has %d bytes available, %s needs %d", pool, p.available, source, img.size)
		}
		x, err := imageVolumeXML(name, img)
		if err != nil {
			return err
		}
		vol, err = l.StorageVolCreateXML(p.pool, x, 0)
		if isCode(err, libvirt.ErrStorageVolExist) {
			exists = true
			return nil
		}
		return err
	})
	if err != nil || exists {
		return vol, false, err
	}
	if err := ctx.Err(); err != nil {
		return vol, false, errors.Join(err, c.do(cctx, func(l api) error { return deleteVolume(l, pool, name) }))
	}
	return vol, true, nil
}

// streamImage writes img's content, read from r, into vol, a volume createImageVolume just made, checking
// the bytes against img's hash before the last of them goes (see verifyingReader). Whatever stops it, the
// partial volume is deleted before it returns: others would wait for it to stall, and it must never be
// taken for the image. Its error is what stopped the stream: the reader's own failure (a hash mismatch, a
// short read, ctx's end) rather than libvirt's report that the stream was aborted.
func streamImage(ctx context.Context, c *conn, pool string, vol libvirt.StorageVol, r io.Reader, img imageInfo) error {
	src := &failureReader{r: &ctxReader{ctx: ctx, r: newVerifyingReader(r, img.size, img.sum)}}
	err := c.do(ctx, func(l api) error { return l.StorageVolUpload(vol, src, 0, uint64(img.size), 0) })
	if err == nil {
		return nil
	}
	if cause := src.failure(); cause != nil {
		err = cause
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if derr := c.do(dctx, func(l api) error { return deleteVolume(l, pool, vol.Name) }); derr != nil {
		return &keptVolumeError{err: err, deleteErr: derr}
	}
	return err
}

// keptVolumeError is a stream that failed and left its partial volume, which could not be deleted. It does
// no harm but to wait: the next create that needs the image deletes it once it has stopped growing.
type keptVolumeError struct{ err, deleteErr error }

func (e *keptVolumeError) Error() string {
	return fmt.Sprintf("%v (and removing the partial volume: %v)", e.err, e.deleteErr)
}

func (e *keptVolumeError) Unwrap() error { return e.err }

// failureReader remembers the first error of its reader other than io.EOF, and counts the bytes it gave:
// go-libvirt aborts the stream on that error and returns the daemon's answer to the abort, not the reason,
// and a download that breaks off says how far it got. Both streams into the pool (a file's, a download's)
// read through one.
type failureReader struct {
	r   io.Reader
	mu  sync.Mutex
	n   int64
	err error
}

func (f *failureReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	f.mu.Lock()
	f.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	return n, err
}

func (f *failureReader) count() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *failureReader) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// imageVolumeXML starts the volume smaller than the file: a raw volume empty, a qcow2 volume as qemu-img's
// bare header with the image's virtual size (so libvirt knows its format and capacity from the start).
func imageVolumeXML(name string, img imageInfo) (string, error) {
	capacity := uint64(0)
	if img.format == formatQCOW2 {
		capacity = img.capacity
	}
	v := libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: capacity},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: img.format}},
	}
	return v.Marshal()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
