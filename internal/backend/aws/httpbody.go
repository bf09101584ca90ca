package aws

import (
	"io"
	"net/http"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
)

// readOnlyBodies is an HTTP client that hands net/http each request body as a plain Reader.
//
// Why: the SDK (smithy-go's ClientHandler) closes a request's body as soon as Do returns, and Do returns once
// the answer's headers are in, which can be before net/http's write loop has finished with the body: after
// writing ContentLength bytes it copies the body once more to check that nothing is left. The SDK's body
// wrapper exposes WriteTo, and once closed its WriteTo answers io.EOF, which io.Copy passes on as an error;
// net/http then takes the request write as failed and closes the connection, while the caller is still
// reading a 200 answer from it ("use of closed network connection", seen once in the fake's tests on a
// loaded machine). Through Read alone a closed body is a clean end of input, so the check passes.
type readOnlyBodies struct{ base awssdk.HTTPClient }

func (c readOnlyBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.base.Do(req)
	}
	out := req.Clone(req.Context())
	out.Body = readOnly{req.Body}
	return c.base.Do(out)
}

// readOnly hides every method of a body but Read and Close (WriteTo above all).
type readOnly struct{ io.ReadCloser }
