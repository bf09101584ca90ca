// Command registry serves an OCI distribution registry (go-containerregistry's pkg/registry, everything held
// in memory, no authentication) on one address, for the tests: internal/provider's registry test runs it on
// the test cluster's node address, pushes the proxy image to it with pushimage, and has the cluster pull it.
//
//	registry -listen 172.31.255.1:5000
//
// Once it accepts connections it prints "listening on ADDRESS" on stdout, so a caller waits for that line
// instead of guessing. Every request is logged on stderr as one JSON object per line (method, uri, status,
// user_agent, remote), which tells the cluster's pulls (containerd's user agent) from the pusher's.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// entry is one request in the log.
type entry struct {
	Method    string `json:"method"`
	URI       string `json:"uri"`
	Status    int    `json:"status"`
	UserAgent string `json:"user_agent"`
	Remote    string `json:"remote"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", l.Addr())
	// The handler's own log would repeat each request in free text: the JSON lines replace it.
	handler := logged(registry.New(registry.Logger(log.New(io.Discard, "", 0))), os.Stderr)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

// logged writes one JSON line per request to w once the handler has answered it.
func logged(h http.Handler, w io.Writer) http.Handler {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(entry{Method: r.Method, URI: r.URL.RequestURI(), Status: sw.status, UserAgent: r.UserAgent(), Remote: r.RemoteAddr})
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}
