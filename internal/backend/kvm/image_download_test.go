package kvm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// imageServer serves one image file on loopback, as a static file server does (with its Content-Length),
// and counts the GETs it answers. fault, when set, answers the n-th request (from 1) instead when it
// returns true.
type imageServer struct {
	*httptest.Server
	path  string
	gets  atomic.Int32
	fault func(n int, w http.ResponseWriter, r *http.Request) bool
}

func serveImage(t testing.TB, path string) *imageServer {
	t.Helper()
	s := &imageServer{path: path}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.gets.Add(1))
		if s.fault != nil && s.fault(n, w, r) {
			return
		}
		f, err := os.Open(s.path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer func() { _ = f.Close() }()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.ServeContent(w, r, "image", st.ModTime(), f)
	}))
	t.Cleanup(s.Close)
	return s
}

// cutAfter is a fault that announces the whole file, sends its first n bytes and drops the connection.
func (s *imageServer) cutAfter(n int64) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		f, err := os.Open(s.path)
		if err != nil {
			panic(err)
		}
		defer func() { _ = f.Close() }()
		st, _ := f.Stat()
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		_, _ = io.CopyN(w, f, n)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // net/http closes the connection without a log line
	}
}

func urlImageSpec(uid, url, sum string) backend.Spec {
	spec := fakeSpec(uid, "o")
	optionsOf(spec.Placement).ImageURL = url
	optionsOf(spec.Placement).ImageSHA256 = sum
	optionsOf(spec.Placement).DiskGiB = 0
	return spec
}

func TestURLVolumeNames(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	name := urlVolumeName(sum, 1234, formatQCOW2)
	if name != "egress-image-abababababababab-1234.qcow2" {
		t.Fatalf("urlVolumeName = %s", name)
	}
	tests := map[string]struct {
		name, sha string
		want      bool
	}{
		"qcow2":                {name, sum, true},
		"raw":                  {urlVolumeName(sum, 7, formatRaw), sum, true},
		"sha in upper case":    {name, strings.ToUpper(sum), true},
		"another image":        {name, strings.Repeat("cd", 32), false},
		"an image file's name": {imageVolumePrefix + sum[:16] + ".qcow2", sum, false},
		"no size":              {imageVolumePrefix + sum[:16] + "-.qcow2", sum, false},
		"zero size":            {imageVolumePrefix + sum[:16] + "-0.qcow2", sum, false},
		"leading zero":         {imageVolumePrefix + sum[:16] + "-012.qcow2", sum, false},
		"other format":         {imageVolumePrefix + sum[:16] + "-12.vmdk", sum, false},
		"bad sha":              {name, "abab", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := IsURLImageVolume(tc.name, tc.sha); got != tc.want {
				t.Errorf("IsURLImageVolume(%s, %s) = %v, want %v", tc.name, tc.sha, got, tc.want)
			}
		})
	}
}

func TestImageSourceValidation(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("0f", 32)
	tests := map[string]struct {
		url, sha string
		err      string // "" accepts; else a part of the error
		shown    string
	}{
		"https":            {"https://images.example/d.qcow2", sum, "", "https://images.example/d.qcow2"},
		"http with port":   {"http://127.0.0.1:8080/d.raw", strings.ToUpper(sum), "", "http://127.0.0.1:8080/d.raw"},
		"password masked":  {"https://u:secret@images.example/d.qcow2", sum, "", "https://u:xxxxx@images.example/d.qcow2"},
		"query left out":   {"https://images.example/d.qcow2?X-Signature=secret#frag", sum, "", "https://images.example/d.qcow2?"},
		"ftp":              {"ftp://images.example/d.qcow2", sum, "must be an http or https URL", ""},
		"no host":          {"https:///d.qcow2", sum, "must be an http or https URL", ""},
		"relative":         {"d.qcow2", sum, "must be an http or https URL", ""},
		"sha short":        {"https://images.example/d.qcow2", sum[:63], "must be 64 hex digits", ""},
		"sha not hex":      {"https://images.example/d.qcow2", strings.Repeat("zz", 32), "must be 64 hex digits", ""},
		"sha with newline": {"https://images.example/d.qcow2", sum + "\n", "must be 64 hex digits", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := parseImageSource(tc.url, tc.sha)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("parseImageSource = %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("parseImageSource = %v, want an error with %q", err, tc.err)
			case tc.err == "" && (src.shown != tc.shown || src.sum != strings.ToLower(tc.sha)):
				t.Errorf("shown %q sum %q, want %q and the sha in lower case", src.shown, src.sum, tc.shown)
			}
		})
	}
}

// Proxies created side by side from one URL cause one download; a later one none at all. The volume holds
// the file byte for byte, is named for its content and size, and outlives every proxy.
func TestFakeImageURLSharedByParallelCreates(t *testing.T) {
	t.Parallel()
	f, b, cnt := slowUploadBackend()
	ctx := context.Background()
	path := writeImage(t, 1<<20, true, 3*gib)
	srv := serveImage(t, path)
	sum := testutil.FileSHA256(t, path)
	name := urlVolumeName(sum, 1<<20, formatQCOW2)

	specs := []backend.Spec{urlImageSpec("u-1", srv.URL+"/d.qcow2", sum), urlImageSpec("u-2", srv.URL+"/d.qcow2", sum), urlImageSpec("u-3", srv.URL+"/d.qcow2", sum)}
	createSideBySide(ctx, t, b, specs)
	if n := srv.gets.Load(); n != 1 {
		t.Errorf("GETs = %d, want 1 for three proxies", n)
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 4 {
		t.Errorf("StorageVolUpload calls = %d, want 4 (the image once, a seed per proxy)", per["StorageVolUpload"])
	}
	want, _ := os.ReadFile(path)
	if img := f.pools["pool"].vols[name]; img == nil || !bytes.Equal(img.data, want) {
		t.Fatalf("image volume %s missing or not the file's content (volumes %v)", name, volNames(f))
	}
	for _, spec := range specs {
		got, err := b.Get(ctx, idOf(spec))
		if err != nil || optionsOf(got.Placement).BaseVolume != name || optionsOf(got.Placement).ImageURL != "" {
			t.Errorf("Get = %+v, %v; want base volume %s and no URL read back", optionsOf(got.Placement), err, name)
		}
	}

	// The image is in the pool: another proxy needs neither the server nor an upload but its seed's.
	srv.Close()
	fourth := urlImageSpec("u-4", srv.URL+"/d.qcow2", sum)
	if _, err := b.Create(ctx, fourth); err != nil {
		t.Fatal(err)
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 1 {
		t.Errorf("fourth Create: %d uploads, want 1 (its seed)", per["StorageVolUpload"])
	}
	deleteProxiesKeepsImage(t, b, f, name, append(specs, fourth)...)
}

// Every way a download fails leaves nothing in the pool, and says what failed with the class that fits:
// Permanent where no retry helps, Transient where one may.
func TestFakeImageURLFailuresLeaveNothing(t *testing.T) {
	t.Parallel()
	other := strings.Repeat("5a", 32)
	tests := map[string]struct {
		wrong bool // image_sha256 is another image's
		fault func(s *imageServer) func(w http.ResponseWriter, r *http.Request)
		class backend.Class
		want  []string // parts of the error
	}{
		"checksum mismatch": {wrong: true, class: backend.ClassPermanent,
			want: []string{"expected " + other, "after all 600000 bytes", "deleted again"}},
		"not found": {class: backend.ClassPermanent, want: []string{"404 Not Found"},
			fault: func(*imageServer) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }
			}},
		"forbidden": {class: backend.ClassPermanent, want: []string{"403 Forbidden"},
			fault: func(*imageServer) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }
			}},
		"server error": {class: backend.ClassTransient, want: []string{"503 Service Unavailable"},
			fault: func(*imageServer) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }
			}},
		"connection dropped": {class: backend.ClassTransient, want: []string{"broke off after 200000 of 600000 bytes", "unexpected EOF", "deleted again"},
			fault: func(s *imageServer) func(http.ResponseWriter, *http.Request) {
				cut := s.cutAfter(200000)
				return func(w http.ResponseWriter, _ *http.Request) { cut(w) }
			}},
		"dropped in the header": {class: backend.ClassTransient, want: []string{"broke off after 10 of 600000 bytes"},
			fault: func(s *imageServer) func(http.ResponseWriter, *http.Request) {
				cut := s.cutAfter(10)
				return func(w http.ResponseWriter, _ *http.Request) { cut(w) }
			}},
		"server goes quiet": {class: backend.ClassTransient, want: []string{"broke off after 300000 of 600000 bytes", "no data received for 2s", "deleted again"},
			fault: func(s *imageServer) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, r *http.Request) {
					data, _ := os.ReadFile(s.path)
					w.Header().Set("Content-Length", strconv.Itoa(len(data)))
					_, _ = w.Write(data[:300000])
					_ = http.NewResponseController(w).Flush()
					<-r.Context().Done() // until the client gives up
				}
			}},
		"no content length": {class: backend.ClassPermanent, want: []string{"no Content-Length"},
			fault: func(s *imageServer) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, _ *http.Request) {
					data, _ := os.ReadFile(s.path)
					_, _ = w.Write(data[:1000])
					_ = http.NewResponseController(w).Flush() // chunked from here: no length
					_, _ = w.Write(data[1000:])
				}
			}},
		"compressed on the way": {class: backend.ClassPermanent, want: []string{"Content-Encoding gzip"},
			fault: func(*imageServer) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Encoding", "gzip")
					_, _ = w.Write([]byte("not really gzip"))
				}
			}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// An image of its own: creates of one image share a download (and its error) in a process.
			path := writeImage(t, 600000, true, gib)
			sum := testutil.FileSHA256(t, path)
			if tc.wrong {
				tc.want = append(tc.want, "sha256 is "+sum)
				sum = other
			}
			f := newFakeHost()
			b, _ := fakeBackend(f)
			// The quiet server never sends again: any limit ends it. The limit also bounds the wait for the
			// first answer, which 100 ms was too short for under the load of a cold make test.
			b.downloadIdle = 2 * time.Second
			srv := serveImage(t, path)
			if tc.fault != nil {
				answer := tc.fault(srv)
				srv.fault = func(_ int, w http.ResponseWriter, r *http.Request) bool { answer(w, r); return true }
			}
			url := srv.URL + "/images/d.qcow2?token=secret"
			_, err := b.Create(context.Background(), urlImageSpec("fail-1", url, sum))
			if backend.ClassOf(err) != tc.class {
				t.Errorf("Create = %v (class %v), want %v", err, backend.ClassOf(err), tc.class)
			}
			if err == nil {
				t.FailNow()
			}
			for _, part := range append(tc.want, "image_url "+srv.URL+"/images/d.qcow2?") {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the URL's query", err)
			}
			if backend.AdviceOf(err) == "" {
				t.Errorf("error %q comes without advice", err)
			}
			if names := volNames(f); len(names) != 0 || len(f.domains) != 0 {
				t.Errorf("left behind: volumes %v, %d domains", names, len(f.domains))
			}
			if n := srv.gets.Load(); n != 1 {
				t.Errorf("GETs = %d, want 1: the backend does not retry, its caller does", n)
			}
		})
	}
}

// A volume of the image's name that a crashed download left half written is never used: it is waited for
// while it might grow, deleted once it stalls, and the image downloaded again.
func TestFakeImageURLAbandonedDownloadIsReplaced(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	b.imageStall = 20 * time.Millisecond
	path := writeImage(t, 300000, false, 0)
	sum := testutil.FileSHA256(t, path)
	data, _ := os.ReadFile(path)
	srv := serveImage(t, path)

	name := urlVolumeName(sum, int64(len(data)), formatRaw)
	x, _ := imageVolumeXML(name, imageInfo{size: int64(len(data)), format: formatRaw})
	vol, _ := f.StorageVolCreateXML(libvirt.StoragePool{Name: "pool"}, x, 0)
	f.pools["pool"].vols[vol.Name].data = data[:len(data)-1] // all but the withheld end
	cnt.take()
	if _, err := b.Create(context.Background(), urlImageSpec("crash-1", srv.URL, sum)); err != nil {
		t.Fatal(err)
	}
	if _, per := cnt.take(); per["StorageVolDelete"] != 1 || srv.gets.Load() != 1 {
		t.Errorf("calls %v, GETs %d: want the stalled volume deleted and the image downloaded once", per, srv.gets.Load())
	}
	if !bytes.Equal(f.pools["pool"].vols[name].data, data) {
		t.Errorf("image volume is not the image")
	}
}

// A download that its caller cancels leaves nothing either, and says it was cancelled.
func TestFakeImageURLCancelledLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	path := writeImage(t, 4<<20, false, 0)
	srv := serveImage(t, path)
	ctx := cancelledAtFirstUpload(t, f)
	if _, err := b.Create(ctx, urlImageSpec("cancel-1", srv.URL, testutil.FileSHA256(t, path))); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Create = %v", err)
	}
	checkNothingLeftAfterCancel(t, f)
}

func TestImageURLPlacementRules(t *testing.T) {
	t.Parallel()
	hosts := map[string]HostConfig{"h": {URI: "test:///x", Pool: "pool", Network: "net", BaseVolume: "host-base", DomainType: DomainTypeQEMU}}
	sum := strings.Repeat("a1", 32)
	tests := map[string]struct {
		change func(p *Options)
		err    string
	}{
		"url and sha":         {func(*Options) {}, ""},
		"url without sha":     {func(p *Options) { p.ImageSHA256 = "" }, "must be 64 hex digits"},
		"sha without url":     {func(p *Options) { p.ImageURL = "" }, "set image_url too"},
		"url and base volume": {func(p *Options) { p.BaseVolume = "b" }, "set only one of base_volume, image_file and image_url"},
		"url and image file":  {func(p *Options) { p.ImageFile = "/x.qcow2" }, "set only one of"},
		"url of another kind": {func(p *Options) { p.ImageURL = "file:///x.qcow2" }, "must be an http or https URL"},
		"all three":           {func(p *Options) { p.ImageFile, p.BaseVolume = "/x", "b" }, "set only one of"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := urlImageSpec("p-1", "https://images.example/d.qcow2", sum)
			tc.change(optionsOf(spec.Placement))
			p, err := resolvePlacement(spec, hosts)
			switch {
			case tc.err == "" && (err != nil || p.BaseVolume != ""):
				t.Errorf("placement = %+v, %v; want the image's, not the host's base volume", p, err)
			case tc.err != "" && (backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("resolvePlacement = %v, want Permanent with %q", err, tc.err)
			}
		})
	}
}
