package kvm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// An image by URL (image_url with image_sha256) is downloaded by the provider process and streamed into the
// pool through libvirt, as an image file is uploaded: nothing is written to local disk, and the bytes are
// hashed as they pass. Its volume is named after the content it must hold and the size the server
// announced: egress-image-<16 hex digits of image_sha256>-<bytes>.qcow2 (or .raw). Proxies of the same
// image share it, and one whose volume is already complete downloads nothing, needing not even the server.
//
// Crash safety is the image file's protocol (imagevol.go) with one addition. A volume is complete when its
// physical size equals the size its name records, and only a download whose every byte hashed to
// image_sha256 reaches that size: verifyingReader withholds the last bytes until the hash matches. So a
// volume of the final name that a crashed or cut download left is smaller than its name says, is never
// taken as the image, and is deleted once it stops growing (imageStall), like an abandoned upload. The size
// is in the name because libvirt has no volume metadata and no rename: a process that finds the volume must
// know, without asking the server, how large the complete image is. Cloning a verified temporary volume to
// the final name would not do: the clone is visible under its final name while libvirt copies it, so a
// daemon that crashed mid-copy would leave exactly the half-written image this avoids.
//
// The announced size is the response's Content-Length: a server that sends none is refused, since the
// volume cannot be named before the stream starts (buffering the image on local disk to learn its size is
// what streaming avoids). Image file and URL volumes of the same content are two volumes, told apart by the
// size in the name.

// ImageURLSchemes are the schemes an image URL may have.
var ImageURLSchemes = []string{"http", "https"}

// ImageSHA256Pattern is an image's SHA-256 as sha256sum prints it: 64 hex digits (either case). The provider
// validates image_sha256 with it at plan time.
var ImageSHA256Pattern = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// ValidateImageURL accepts the URLs Create can download an image from.
func ValidateImageURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || !slices.Contains(ImageURLSchemes, u.Scheme) || u.Host == "" {
		return fmt.Errorf("image URL %q must be an http or https URL, such as https://images.example/debian-12.qcow2", s)
	}
	return nil
}

// ValidateImageSHA256 accepts the SHA-256 of an image as 64 hex digits.
func ValidateImageSHA256(s string) error {
	if !ImageSHA256Pattern.MatchString(s) {
		return fmt.Errorf("image SHA-256 %q must be 64 hex digits, as sha256sum prints them", s)
	}
	return nil
}

// IsURLImageVolume reports whether volume is the pool volume of an image whose SHA-256 is sha: the provider
// plans no replacement when an imported proxy's base volume is the image the configuration names.
func IsURLImageVolume(volume, sha string) bool {
	if ValidateImageSHA256(sha) != nil {
		return false
	}
	_, _, ok := parseURLVolumeName(volume, strings.ToLower(sha))
	return ok
}

// imageSource is an image to download and the SHA-256 its content must have.
type imageSource struct {
	url *url.URL
	sum string // lowercase hex
	// shown is the URL as errors show it: a password in it masked and its query left out, since a
	// pre-signed URL carries its credentials there.
	shown string
}

func parseImageSource(rawURL, sha string) (imageSource, error) {
	if err := ValidateImageURL(rawURL); err != nil {
		return imageSource{}, err
	}
	if err := ValidateImageSHA256(sha); err != nil {
		return imageSource{}, err
	}
	u, _ := url.Parse(rawURL) // parsed by ValidateImageURL
	shown := *u
	if shown.RawQuery != "" {
		shown.RawQuery, shown.ForceQuery = "", true
	}
	shown.Fragment, shown.RawFragment = "", ""
	return imageSource{url: u, sum: strings.ToLower(sha), shown: shown.Redacted()}, nil
}

// urlVolumeName is the volume of an image of size bytes in format whose SHA-256 is sum.
func urlVolumeName(sum string, size int64, format string) string {
	return fmt.Sprintf("%s%s-%d.%s", imageVolumePrefix, sum[:16], size, format)
}

// parseURLVolumeName reads the size and format back from a name urlVolumeName made for sum.
func parseURLVolumeName(name, sum string) (int64, string, bool) {
	rest, ok := strings.CutPrefix(name, imageVolumePrefix+sum[:16]+"-")
	if !ok {
		return 0, "", false
	}
	digits, format, ok := strings.Cut(rest, ".")
	if !ok || (format != formatQCOW2 && format != formatRaw) {
		return 0, "", false
	}
	size, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || size <= 0 || strconv.FormatInt(size, 10) != digits {
		return 0, "", false
	}
	return size, format, true
}

// placedImage is an image volume ready to back overlays.
type placedImage struct {
	name string
	base baseVolume
}

// urlImageFlights makes creates in one process that need the same image in the same pool share one
// download, as imageFlights does for files.
var urlImageFlights flights[placedImage]

// defaultDownloadIdle is how long a download may receive nothing before it is abandoned: a server that
// stops sending without closing the connection would otherwise hold the create until its timeout. Shorter
// than libvirtconn's uploadStall, so that the error names the server rather than the libvirt stream waiting
// on it.
const defaultDownloadIdle = time.Minute

// errDownloadIdle ends a download whose server went quiet.
var errDownloadIdle = errors.New("no data received")

func newImageHTTPClient() *http.Client {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok { // replaced by someone in this process: start from what matters here
		base = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	t := base.Clone()
	// image_sha256 is the hash of the file as published: a body decompressed on the way would never match.
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// placeImageURL makes sure the placement's image is in its pool, downloading it if needed, and makes that
// volume the proxy's base.
func (b *Backend) placeImageURL(ctx context.Context, c *conn, p placement) (placement, error) {
	src, err := parseImageSource(p.ImageURL, p.ImageSHA256)
	if err != nil {
		return p, backend.NewError(backend.ClassPermanent, "image_url", err)
	}
	object := fmt.Sprintf("image_url %s for pool %s on host %s", src.shown, p.Pool, p.Host)
	// The URL is part of the key: a proxy must not get the error of another URL that names the same image.
	// Two URLs of one image meet in the pool instead, where one download waits for the other's volume.
	key := c.host.URI + "\x00" + p.Pool + "\x00" + src.sum + "\x00" + src.url.String()
	img, err := urlImageFlights.do(ctx, key, func(ctx context.Context) (placedImage, error) {
		return b.placeURLImage(ctx, c, p.Pool, src)
	})
	if err != nil {
		return p, classify(object, err)
	}
	p.BaseVolume, p.base = img.name, &img.base
	return p, nil
}

// urlImageVolume is a volume named for the image, as the pool shows it.
type urlImageVolume struct {
	name string
	imageVolState
}

// placeURLImage follows the image file's protocol (placeImage) over every volume named for the image: a
// complete one is used; none at all is downloaded; incomplete ones are waited for while they grow and
// deleted once they stall.
func (b *Backend) placeURLImage(ctx context.Context, c *conn, pool string, src imageSource) (placedImage, error) {
	watched := map[string]*growth{}
	for {
		var vols []urlImageVolume
		err := c.do(ctx, func(l api) error {
			var err error
			vols, err = readURLImageVolumes(l, pool, src.sum)
			return err
		})
		if err != nil {
			return placedImage{}, err
		}
		for _, v := range vols {
			if v.complete {
				return placedImage{name: v.name, base: v.base}, nil
			}
		}
		if len(vols) == 0 {
			// Whether this download made the volume or met one another process had just made, the next
			// read decides what to do with it.
			created, err := b.downloadImage(ctx, c, pool, src)
			if err != nil {
				return placedImage{}, err
			}
			clear(watched)
			if !created {
				// Another process's volume, still being made: give it a poll before reading it again,
				// rather than start a request per read while libvirt builds it (see readURLImageVolumes).
				if err := sleepCtx(ctx, b.pollInterval); err != nil {
					return placedImage{}, err
				}
			}
			continue
		}
		seen := map[string]*growth{}
		for _, v := range vols {
			g := watched[v.name]
			if g == nil {
				g = &growth{}
			}
			if !g.stalled(v.size, b.imageStall) {
				seen[v.name] = g
				continue
			}
			// Its downloader is gone (see placeImage).
			if err := c.do(ctx, func(l api) error { return deleteVolume(l, pool, v.name) }); err != nil {
				return placedImage{}, err
			}
		}
		watched = seen
		if err := sleepCtx(ctx, b.pollInterval); err != nil {
			return placedImage{}, fmt.Errorf("waiting for image volume %s (%d bytes so far) that another download is writing: %w", vols[0].name, vols[0].size, err)
		}
	}
}

// readURLImageVolumes lists the pool's volumes named for the image whose SHA-256 is sum, with their state.
func readURLImageVolumes(l api, pool, sum string) ([]urlImageVolume, error) {
	p, err := activePool(l, pool)
	if err != nil {
		return nil, err
	}
	all, _, err := l.StoragePoolListAllVolumes(p.pool, 1, 0)
	if err != nil {
		return nil, err
	}
	var out []urlImageVolume
	for _, v := range all {
		size, format, ok := parseURLVolumeName(v.Name, sum)
		if !ok {
			continue
		}
		st, err := readImageVolume(l, pool, v.Name, imageInfo{size: size, format: format})
		if err != nil {
			return nil, err
		}
		// Listed but not readable: libvirt (9.0, a dir pool) answers "no storage vol" for a volume it is
		// still building, and for one deleted since the list. Either way it is not the image yet, and it
		// must not be taken for no volume at all, which would start another download: it is watched as
		// an empty one, and the next list tells which it was.
		st.missing = false
		out = append(out, urlImageVolume{name: v.Name, imageVolState: st})
	}
	return out, nil
}

// downloadImage streams the image from its server into a new volume of the pool. It reports false, and
// does nothing, when the volume exists already (another process started the same download first). Its
// errors are classified here, where the HTTP status and the broken stream are still told apart: Permanent
// for what no retry fixes (a wrong checksum, a URL the server refuses), Transient for what may pass (a
// dropped connection, a server error).
func (b *Backend) downloadImage(ctx context.Context, c *conn, pool string, src imageSource) (bool, error) {
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Armed while the download waits on the server (for its answer, then in each read of the body), stopped
	// while the bytes go on to libvirt: a slow pool is the stream's to detect (libvirtconn's uploadStall),
	// not the server's.
	idle := time.AfterFunc(b.downloadIdle, func() { cancel(errDownloadIdle) })
	defer idle.Stop()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, src.url.String(), nil)
	if err != nil {
		return false, downloadError(backend.ClassPermanent, adviceURL, "%v", err)
	}
	resp, err := b.httpClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, requestError(err, b.downloadIdle, context.Cause(dctx))
	}
	defer func() { _ = resp.Body.Close() }() // what is left unread is abandoned: the connection goes with it
	idle.Stop()
	if err := responseError(resp); err != nil {
		return false, err
	}
	body := &failureReader{r: &idleTimedReader{r: resp.Body, idle: idle, after: b.downloadIdle}}
	header := make([]byte, min(imageHeaderSize, resp.ContentLength))
	if _, err := io.ReadFull(body, header); err != nil {
		return false, b.brokenDownload(ctx, dctx, body, resp.ContentLength, err, "")
	}
	info := imageInfo{size: resp.ContentLength, sum: src.sum}
	info.format, info.capacity, err = identifyImage(header, info.size)
	if errors.Is(err, errBackingFile) {
		return false, downloadError(backend.ClassPermanent, "Serve a standalone image instead: flatten the overlay "+
			"(qemu-img convert -O qcow2 overlay.qcow2 flat.qcow2), publish it, and set image_url and image_sha256 to it.",
			"the image is a qcow2 overlay with a backing file, which the pool would not have")
	}
	name := urlVolumeName(src.sum, info.size, info.format)
	vol, created, err := createImageVolume(ctx, c, pool, name, info, "image_url "+src.shown)
	if err != nil || !created {
		return false, err
	}
	err = streamImage(ctx, c, pool, vol, io.MultiReader(bytes.NewReader(header), body), info)
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, err
	}
	// What became of the partial volume, said after what stopped the download.
	volume := fmt.Sprintf("volume %s deleted again", name)
	var kept *keptVolumeError
	if errors.As(err, &kept) {
		volume = fmt.Sprintf("volume %s left behind, deleting it failed (%v): the next create that needs the image deletes it", name, kept.deleteErr)
		err = kept.err
	}
	var digest *digestError
	var short *shortError
	switch {
	case errors.As(err, &digest):
		return false, downloadError(backend.ClassPermanent, adviceChecksum, "the downloaded image's sha256 is %s, expected %s (kvm.image_sha256), after all %d bytes; %s",
			digest.got, digest.want, info.size, volume)
	case body.failure() != nil, errors.As(err, &short):
		return false, b.brokenDownload(ctx, dctx, body, info.size, err, "; "+volume)
	}
	// libvirt's own failure (no space left, the daemon gone): its code decides, as for any other call.
	return false, fmt.Errorf("streaming the download into the pool: %w; %s", err, volume)
}

// Advice for download errors, in the terms of the proxy's kvm block.
const (
	adviceURL = "Correct kvm.image_url, or make the image available at it, then apply again."
	// A Transient error's advice is read once its retries ran out: the create's timeout ended.
	adviceServer = "The download was retried until the create's timeout ended, each time from the start. " +
		"Check that the image server is up and reachable from where " +
		"Terraform runs (a proxy in between is taken from HTTPS_PROXY and NO_PROXY), or point kvm.image_url " +
		"at another copy of the same image (same kvm.image_sha256), then apply again."
	adviceChecksum = "The server's image is not the one kvm.image_sha256 names, and was not used. " +
		"Compare kvm.image_sha256 with the checksum its publisher lists for this exact file (sha256sum of a " +
		"downloaded copy prints it). A URL that always points at the latest build serves a new image after each " +
		"release: use the URL of one dated build, or set kvm.image_sha256 to the new image's, then apply again."
	adviceLength = "The provider names the image's volume after its size before the first byte arrives, so that a " +
		"partial image is never taken for a complete one. Serve the image from a server that sends its " +
		"Content-Length (any static file server does), or download it yourself and set kvm.image_file instead."
)

func downloadError(class backend.Class, advice, format string, args ...any) error {
	return &backend.Error{Class: class, Err: fmt.Errorf(format, args...), Advice: advice}
}

// requestError classifies a request that got no answer. The client's url.Error is dropped: it repeats the
// URL (which the error's object names already) whole, query included.
func requestError(err error, idle time.Duration, cause error) error {
	if errors.Is(cause, errDownloadIdle) {
		return downloadError(backend.ClassTransient, adviceServer, "no answer from the server within %s", idle)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var dns *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return downloadError(backend.ClassPermanent, adviceURL, "the server's host name does not resolve: %v", err)
	case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &invalid), errors.As(err, &verify):
		return downloadError(backend.ClassPermanent, "Serve the image with a certificate the machine running "+
			"Terraform trusts (its system CA pool, or SSL_CERT_FILE), or correct the host in kvm.image_url, then apply again.",
			"the server's certificate is not trusted: %v", err)
	}
	return downloadError(backend.ClassTransient, adviceServer, "no answer from the server: %v", err)
}

// responseError refuses an answer that is not the image, or one whose size the server does not announce.
func responseError(resp *http.Response) error {
	status := resp.Status
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return downloadError(backend.ClassTransient, adviceServer, "the server answered %s", status)
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		return downloadError(backend.ClassPermanent, "The server refused access to the image. kvm.image_url must be "+
			"readable with what it carries (a pre-signed URL, user and password in it), or from a server that "+
			"needs none; correct it, then apply again.", "the server answered %s", status)
	default:
		return downloadError(backend.ClassPermanent, adviceURL, "the server answered %s, not the image", status)
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return downloadError(backend.ClassPermanent, "Serve the image as it is, without compression on the way "+
			"(a compressed file is fine when kvm.image_sha256 is its own checksum and it is served as is), then apply again.",
			"the server sent the image with Content-Encoding %s: its bytes are not the image's", enc)
	}
	switch {
	case resp.ContentLength < 0:
		return downloadError(backend.ClassPermanent, adviceLength, "the server sent no Content-Length")
	case resp.ContentLength == 0:
		return downloadError(backend.ClassPermanent, adviceURL, "the server sent an empty file")
	}
	return nil
}

// brokenDownload is a download that stopped before its end: a dropped connection, a server gone quiet.
// after says what became of its volume, if it had one.
func (b *Backend) brokenDownload(ctx, dctx context.Context, body *failureReader, size int64, err error, after string) error {
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(context.Cause(dctx), errDownloadIdle) {
		err = fmt.Errorf("%w for %s", errDownloadIdle, b.downloadIdle)
	}
	return downloadError(backend.ClassTransient, adviceServer,
		"the download broke off after %d of %d bytes: %v%s", body.count(), size, err, after)
}

// idleTimedReader runs the idle timer while a read of the response body waits on the server, and only then:
// the time the bytes then take to reach the pool is not the server's to answer for.
type idleTimedReader struct {
	r     io.Reader
	idle  *time.Timer
	after time.Duration
}

func (d *idleTimedReader) Read(p []byte) (int, error) {
	d.idle.Reset(d.after)
	n, err := d.r.Read(p)
	d.idle.Stop()
	return n, err
}
