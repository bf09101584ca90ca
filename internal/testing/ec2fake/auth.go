package ec2fake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Signature Version 4 ("Create a signed AWS API request", "Elements of an AWS API request signature"): the
// Authorization header names the access key and the credential scope (date/region/service/aws4_request), the
// headers signed, and the signature over the canonical request. The fake accepts only its own access key and
// recomputes the signature with its secret, so a request signed for another service, with another secret or
// altered after signing is refused as the service would.

// scope is what a verified request's credential scope says, and who signed it.
type scope struct {
	accessKey, date, region, service string
	principal                        *principal
}

// principal is a set of credentials the fake accepts: its user's long-term access key, or a role session's
// temporary one, which goes with its session token and ends at expires ("Use temporary credentials with AWS
// resources", IAM user guide: the access key, secret and session token are used together).
type principal struct {
	secret, token string
	// arn and userID are what GetCallerIdentity names.
	arn, userID string
	// expires is zero for the long-term key.
	expires time.Time
	// session is the role session the credentials are of; nil for the user's.
	session *Session
	// policies are a user's identity-based policies, evaluated when evaluated is set (R51); a session's are
	// its role's.
	policies  []policyDocument
	evaluated bool
}

// authFailure is what each service answers when the credentials are missing, unknown, expired, or the
// signature does not match. EC2 answers MissingAuthenticationToken to the first, RequestExpired to expired
// ones and AuthFailure to the others ("EC2 API Reference: Error codes", AuthFailure: "The provided credentials
// could not be validated"); SSM and STS have an error of each kind (the Common Errors of their API
// references: MissingAuthenticationToken, UnrecognizedClientException / InvalidClientTokenId,
// ExpiredTokenException / ExpiredToken, InvalidSignatureException / SignatureDoesNotMatch); Service Quotas,
// another JSON service, answers as SSM does.
func authFailure(service, kind, detail string) *apiError {
	const ec2Words = "AWS was not able to validate the provided access credentials"
	const badKey = "The security token included in the request is invalid."
	const badSig = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	const expired = "The security token included in the request is expired"
	switch service {
	case "ssm", "servicequotas", "logs":
		switch kind {
		case "missing":
			return ssmErr("MissingAuthenticationTokenException", "Missing Authentication Token")
		case "key":
			return ssmErr("UnrecognizedClientException", badKey)
		case "expired":
			return ssmErr("ExpiredTokenException", expired)
		}
		return ssmErr("InvalidSignatureException", "%s", badSig+detail)
	case "sts", "iam", "elasticloadbalancing":
		switch kind {
		case "missing":
			return stsErr("MissingAuthenticationToken", "Request is missing Authentication Token")
		case "key":
			return stsErr("InvalidClientTokenId", badKey)
		case "expired":
			return stsErr("ExpiredToken", expired)
		}
		return stsErr("SignatureDoesNotMatch", "%s", badSig+detail)
	}
	switch kind {
	case "missing":
		return ec2Err("MissingAuthenticationToken", "The request must contain either a valid (registered) AWS access key ID or X.509 certificate.")
	case "expired":
		return ec2Err("RequestExpired", "Request has expired.")
	}
	return ec2Err("AuthFailure", ec2Words)
}

// verify checks r's SigV4 signature with the credentials of the access key it names: the fake's user's, or a
// role session's, whose session token the request must carry and whose expiry (on the fake's clock) must not
// have passed. service is the service the request's shape names, for the error's form.
func (s *Server) verify(r *http.Request, body []byte, service string) (scope, *apiError) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return scope{}, authFailure(service, "missing", "")
	}
	algo, rest, _ := strings.Cut(auth, " ")
	if algo != "AWS4-HMAC-SHA256" {
		return scope{}, authFailure(service, "signature", "")
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 5 || cred[4] != "aws4_request" {
		return scope{}, authFailure(service, "signature", "")
	}
	sc := scope{accessKey: cred[0], date: cred[1], region: cred[2], service: cred[3]}
	s.mu.Lock()
	p, now := s.principals[sc.accessKey], s.now()
	s.mu.Unlock()
	// A long-term key carries no session token, a temporary one its own: anything else is a key the
	// service does not know.
	if p == nil || r.Header.Get("X-Amz-Security-Token") != p.token {
		return sc, authFailure(service, "key", "")
	}
	if sc.service != service {
		return sc, authFailure(service, "signature", " Credential should be scoped to correct service: '"+service+"'.")
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if len(amzDate) < 8 || amzDate[:8] != sc.date {
		return sc, authFailure(service, "signature", "")
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	if !sortedAndHas(signed, "host") {
		return sc, authFailure(service, "signature", "")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	var canon strings.Builder
	for _, h := range signed {
		canon.WriteString(h + ":" + canonicalHeader(r, h) + "\n")
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canonicalRequest := strings.Join([]string{r.Method, path, canonicalQuery(r.URL.Query()), canon.String(), fields["SignedHeaders"], payload}, "\n")
	crHash := sha256.Sum256([]byte(canonicalRequest))
	credScope := strings.Join(cred[1:], "/")
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + credScope + "\n" + hex.EncodeToString(crHash[:])
	key := []byte("AWS4" + p.secret)
	for _, part := range cred[1:] {
		key = hmacSHA256(key, part)
	}
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return sc, authFailure(service, "signature", "")
	}
	if !p.expires.IsZero() && !now.Before(p.expires) {
		return sc, authFailure(service, "expired", "")
	}
	sc.principal = p
	return sc, nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func sortedAndHas(names []string, want string) bool {
	if !sort.StringsAreSorted(names) {
		return false
	}
	i := sort.SearchStrings(names, want)
	return i < len(names) && names[i] == want
}

// canonicalHeader is a signed header's canonical value: host and content-length as the request carried
// them, others' values trimmed, inner runs of spaces made one, joined by commas.
func canonicalHeader(r *http.Request, name string) string {
	switch name {
	case "host":
		return r.Host
	case "content-length":
		return strconv.FormatInt(r.ContentLength, 10)
	}
	var vals []string
	for _, v := range r.Header.Values(name) {
		vals = append(vals, strings.Join(strings.Fields(v), " "))
	}
	return strings.Join(vals, ",")
}

func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vals := range q {
		for _, v := range vals {
			parts = append(parts, strings.ReplaceAll(url.QueryEscape(k), "+", "%20")+"="+strings.ReplaceAll(url.QueryEscape(v), "+", "%20"))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}
