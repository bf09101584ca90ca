package ec2fake

import (
	"io"
	"net/http"
)

// readOnlyBodies hands net/http each request body as a plain Reader, as the aws backend's client does
// (internal/backend/aws/httpbody.go, which says why): the SDK closes a request body as soon as Do returns,
// possibly before net/http's write loop has made its last read of it, and the SDK's closed body answers
// WriteTo with io.EOF, which makes net/http close the connection under an answer still being read ("use of
// closed network connection" in TestDocumentedRules/R13 on a loaded machine). Read alone ends cleanly.
type readOnlyBodies struct{ base http.RoundTripper }

func (t readOnlyBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return t.base.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	out.Body = readOnly{req.Body}
	return t.base.RoundTrip(out)
}

// readOnly hides every method of a body but Read and Close.
type readOnly struct{ io.ReadCloser }
