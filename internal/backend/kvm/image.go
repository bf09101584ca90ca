package kvm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"time"
)

// A proxy's image file is uploaded into the pool once and shared: the volume is named after the SHA-256 of
// the file's content (imageVolumePrefix + 16 hex digits + .qcow2 or .raw), so a volume of that name can only
// ever hold that content, and every proxy made from the same file, by any process, uses the same volume.
// The provider never deletes image volumes: Delete leaves them for the next proxy, and ListByTag does not
// report them (they belong to no proxy). Users remove images no domain uses any more themselves
// (virsh vol-list <pool> | grep egress-image-, then virsh vol-delete).
const imageVolumePrefix = "egress-image-"

// Image formats, as libvirt names them. qcow2 files are recognised by their magic, anything else is raw.
const (
	formatQCOW2 = "qcow2"
	formatRaw   = "raw"
)

var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// imageInfo is what the upload needs to know about an image file.
type imageInfo struct {
	path    string
	size    int64
	modTime time.Time
	sum     string // hex SHA-256 of the content
	format  string
	// capacity is the disk size the image gives the guest: the qcow2 header's virtual size, or the file size.
	capacity uint64
}

func (i imageInfo) volumeName() string {
	ext := ".raw"
	if i.format == formatQCOW2 {
		ext = ".qcow2"
	}
	return imageVolumePrefix + i.sum[:16] + ext
}

// imageHashes caches hashes by path, size and modification time for the life of the process: a plan with
// many proxies from one multi-GiB image reads it once. hashFlights makes concurrent creates wait for the
// one hash in progress rather than read the same file twice on the same cores.
var (
	imageHashesMu sync.Mutex
	imageHashes   = map[string]imageInfo{}
	hashFlights   flights[imageInfo]
)

// inspectImage stats, hashes (streaming, never the whole file in memory) and identifies an image file.
func inspectImage(ctx context.Context, path string) (imageInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return imageInfo{}, fmt.Errorf("image file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return imageInfo{}, fmt.Errorf("image file %s is not a regular file", path)
	}
	imageHashesMu.Lock()
	cached, ok := imageHashes[path]
	imageHashesMu.Unlock()
	if ok && cached.size == st.Size() && cached.modTime.Equal(st.ModTime()) {
		return cached, nil
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	return hashFlights.do(ctx, key, func(ctx context.Context) (imageInfo, error) {
		info, err := hashImage(ctx, path, st)
		if err == nil {
			imageHashesMu.Lock()
			imageHashes[path] = info
			imageHashesMu.Unlock()
		}
		return info, err
	})
}

func hashImage(ctx context.Context, path string, st os.FileInfo) (imageInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return imageInfo{}, fmt.Errorf("image file: %w", err)
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	info := imageInfo{path: path, size: st.Size(), modTime: st.ModTime()}
	header := make([]byte, imageHeaderSize)
	n, err := io.ReadFull(f, header)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return imageInfo{}, fmt.Errorf("reading image file %s: %w", path, err)
	}
	info.format, info.capacity, err = identifyImage(header[:n], st.Size())
	if errors.Is(err, errBackingFile) {
		return imageInfo{}, fmt.Errorf("image file %s is a qcow2 overlay with a backing file: flatten it first (qemu-img convert -O qcow2 %s flat.qcow2)", path, path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return imageInfo{}, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, &ctxReader{ctx: ctx, r: f}); err != nil {
		return imageInfo{}, fmt.Errorf("hashing image file %s: %w", path, err)
	}
	info.sum = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

// imageHeaderSize is how much of an image identifyImage reads: the qcow2 header fields it needs.
const imageHeaderSize = 72

// errBackingFile is a qcow2 image that is an overlay: its backing file would not be in the pool.
var errBackingFile = errors.New("qcow2 overlay with a backing file")

// identifyImage tells an image's format and the disk size it gives the guest from its first bytes: qcow2 by
// its magic, with the virtual size from its header; anything else is raw, as large as the image itself.
func identifyImage(header []byte, size int64) (format string, capacity uint64, err error) {
	if len(header) < 32 || !bytes.Equal(header[:4], qcow2Magic) {
		return formatRaw, uint64(size), nil
	}
	// qcow2 header: backing_file_offset at 8, virtual size at 24, both big-endian uint64.
	if binary.BigEndian.Uint64(header[8:16]) != 0 {
		return "", 0, errBackingFile
	}
	return formatQCOW2, binary.BigEndian.Uint64(header[24:32]), nil
}

// ctxReader ends a read (a hash or an upload stream) as soon as ctx ends: an upload aborted this way makes
// go-libvirt abort the stream, so libvirtd stops writing.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// verifyingReader passes exactly size bytes of r and checks they hash to sum before it hands over the last
// of them: a file changed since it was hashed fails the upload (and the volume is deleted) without the
// volume ever reaching its full size, which is what tells other processes an image volume is complete.
type verifyingReader struct {
	r    io.Reader
	h    hash.Hash
	left int64
	sum  string
}

func newVerifyingReader(r io.Reader, size int64, sum string) *verifyingReader {
	return &verifyingReader{r: io.LimitReader(r, size), h: sha256.New(), left: size, sum: sum}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.left == 0 {
		return 0, io.EOF
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.left -= int64(n)
	switch {
	case v.left == 0:
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.sum {
			return 0, &digestError{got: got, want: v.sum}
		}
		return n, nil
	case errors.Is(err, io.EOF):
		return 0, &shortError{missing: v.left}
	}
	return n, err
}

// digestError is content that does not hash to the SHA-256 it should have.
type digestError struct{ got, want string }

func (e *digestError) Error() string {
	return fmt.Sprintf("the content's sha256 is %s, expected %s", e.got, e.want)
}

// shortError is content that ended before its announced size.
type shortError struct{ missing int64 }

func (e *shortError) Error() string {
	return fmt.Sprintf("the content ended %d bytes short", e.missing)
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ImageVolumeName is the name of the volume an image file becomes in a pool: what Create uploads it as and
// what Get reports as the proxy's base volume. It hashes the file (cached per path, size and modification time).
func ImageVolumeName(ctx context.Context, path string) (string, error) {
	info, err := inspectImage(ctx, path)
	if err != nil {
		return "", err
	}
	return info.volumeName(), nil
}
