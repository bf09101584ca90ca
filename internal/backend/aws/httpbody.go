package aws

import (
	"io"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// readOnlyBodies is a RoundTripper that hands net/http each request body as a plain Reader.
//
// Why: the SDK (smithy-go's ClientHandler) closes a request's body as soon as Do returns, and Do returns once
// the answer's headers are in, which can be before net/http's write loop has finished with the body: after
// writing ContentLength bytes it copies the body once more to check that nothing is left. The SDK's body
// wrapper exposes WriteTo, and once closed its WriteTo answers io.EOF, which io.Copy passes on as an error;
// net/http then takes the request write as failed and closes the connection, while the caller is still
// reading a 200 answer from it ("use of closed network connection", seen once in the fake's tests on a
// loaded machine). Through Read alone a closed body is a clean end of input, so the check passes.
type readOnlyBodies struct{ base http.RoundTripper }

func (t readOnlyBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return t.base.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	out.Body = readOnly{req.Body}
	return t.base.RoundTrip(out)
}

// readOnly hides every method of a body but Read and Close (WriteTo above all).
type readOnly struct{ io.ReadCloser }

// sdkHTTPClient is the SDK's default client with readOnlyBodies in front of its transport.
func sdkHTTPClient() *http.Client {
	return &http.Client{Transport: readOnlyBodies{base: awshttp.NewBuildableClient().GetTransport()}}
}

// withReadOnlyBodies is c with readOnlyBodies in front of its transport.
func withReadOnlyBodies(c *http.Client) *http.Client {
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	out := *c
	out.Transport = readOnlyBodies{base: base}
	return &out
}
