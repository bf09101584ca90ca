// Package imdsfake is the EC2 instance metadata service (IMDS) of one instance, for tests, as an instance
// launched with HttpTokens=required sees it: IMDSv2 only. Every read needs a session token from PUT
// /latest/api/token, honoured for exactly the TTL it was asked for; a read without one, or with one unknown or
// expired, is 401. It serves the instance role's credentials (rotated before they expire, as EC2 does),
// user-data, and whatever metadata a test sets (the network interfaces' public addresses).
//
// README.md lists each rule the fake enforces with its source; rules_test.go proves each, with the AWS SDK's
// own IMDS client and credential provider where they read it.
package imdsfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header names, as the EC2 User Guide spells them ("Use the Instance Metadata Service to access instance
// metadata"). Go canonicalises them on the wire.
const (
	TokenHeader    = "X-aws-ec2-metadata-token"
	TokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
	// MaxTokenTTL is six hours, the longest a token may live (R1).
	MaxTokenTTL = 21600
)

// Options shape a Server. The zero value is an instance without a role and without user-data.
type Options struct {
	// Role is the instance profile's role, whose credentials iam/security-credentials/ serves; empty: none.
	Role string
	// CredentialLifetime is how long credentials are valid from their issue; 6 hours by default.
	CredentialLifetime time.Duration
	// RotateBefore is how long before their expiry credentials are replaced by new ones; 5 minutes by
	// default, the least EC2 promises (R10).
	RotateBefore time.Duration
	// NewCredentials, when set, makes the nth (from 0) set of credentials; random ones by default.
	NewCredentials func(n int) (accessKeyID, secretAccessKey, sessionToken string)
	// Now, when set, is the fake's clock: token and credential lifetimes follow it.
	Now func() time.Time
}

// Credentials is one set the fake issued.
type Credentials struct {
	AccessKeyID, SecretAccessKey, Token string
	Issued, Expiration                  time.Time
}

// Request is one request the fake answered.
type Request struct {
	Method, Path string
	Status       int
	// WithToken tells whether it carried a session token header (valid or not).
	WithToken bool
	Time      time.Time
}

// Server is the fake; its methods are safe for concurrent use with requests in flight.
type Server struct {
	mu       sync.Mutex
	opts     Options
	tokens   map[string]time.Time // token -> expiry
	metadata map[string]string    // path under /latest/meta-data/ -> value
	userData []byte
	creds    []Credentials
	requests []Request
}

// New makes a fake. Serve it with Handler on the address the instance reaches (169.254.169.254:80 in a network
// namespace), or with httptest.
func New(opts Options) *Server {
	if opts.CredentialLifetime <= 0 {
		opts.CredentialLifetime = 6 * time.Hour
	}
	if opts.RotateBefore <= 0 {
		opts.RotateBefore = 5 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewCredentials == nil {
		opts.NewCredentials = func(int) (string, string, string) {
			return "ASIA" + strings.ToUpper(randomHex(8)), randomHex(20), randomHex(32)
		}
	}
	return &Server{opts: opts, tokens: map[string]time.Time{}, metadata: map[string]string{}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// SetMetadata sets the value at path under /latest/meta-data/ (such as
// "network/interfaces/macs/0e:49:61:0f:c3:11/public-ipv4s"); an empty value removes it. The directories above
// it list it (R9).
func (s *Server) SetMetadata(path, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path = strings.Trim(path, "/")
	if value == "" {
		delete(s.metadata, path)
		return
	}
	s.metadata[path] = value
}

// SetUserData sets what /latest/user-data answers; nil: 404 (R11).
func (s *Server) SetUserData(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.userData = append([]byte(nil), b...)
}

// ExpireTokens ends every session token issued so far, as their TTL running out would: the next read with
// one is 401.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// IssuedCredentials are the credentials served so far, oldest first.
func (s *Server) IssuedCredentials() []Credentials {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Credentials(nil), s.creds...)
}

// Requests are the requests answered so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Handler serves the fake.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

const (
	tokenPath    = "/latest/api/token"
	metadataPath = "/latest/meta-data/"
	userDataPath = "/latest/user-data"
	credsDir     = "iam/security-credentials"
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	status, body, header := s.answer(r, now)
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Status: status, WithToken: r.Header.Get(TokenHeader) != "", Time: now})
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// answer decides one request, with s.mu held.
func (s *Server) answer(r *http.Request, now time.Time) (int, string, map[string]string) {
	if r.URL.Path == tokenPath {
		return s.token(r, now)
	}
	if r.Method != http.MethodGet {
		return http.StatusMethodNotAllowed, "", nil // R7
	}
	// R4, R5, R6: HttpTokens=required, so no read goes without a live token.
	tok := r.Header.Get(TokenHeader)
	if exp, ok := s.tokens[tok]; tok == "" || !ok || !now.Before(exp) {
		return http.StatusUnauthorized, "", nil
	}
	switch {
	case r.URL.Path == userDataPath:
		if s.userData == nil {
			return http.StatusNotFound, "", nil // R11
		}
		return http.StatusOK, string(s.userData), nil
	case r.URL.Path == strings.TrimSuffix(metadataPath, "/") || strings.HasPrefix(r.URL.Path, metadataPath):
		return s.metadataAt(strings.Trim(strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(metadataPath, "/")), "/"), now)
	}
	return http.StatusNotFound, "", nil // R8
}

// token issues a session token (R1, R2, R3).
func (s *Server) token(r *http.Request, now time.Time) (int, string, map[string]string) {
	if r.Method != http.MethodPut {
		return http.StatusMethodNotAllowed, "", nil // R7
	}
	if r.Header.Get("X-Forwarded-For") != "" {
		return http.StatusForbidden, "", nil // R3
	}
	ttl, err := strconv.Atoi(r.Header.Get(TokenTTLHeader))
	if err != nil || ttl < 1 || ttl > MaxTokenTTL {
		return http.StatusBadRequest, "", nil // R1
	}
	tok := randomHex(28)
	s.tokens[tok] = now.Add(time.Duration(ttl) * time.Second)
	return http.StatusOK, tok, map[string]string{TokenTTLHeader: strconv.Itoa(ttl)} // R2
}

// metadataAt answers a path under meta-data: a value, or a directory's listing (R9), or the role's
// credentials (R10).
func (s *Server) metadataAt(path string, now time.Time) (int, string, map[string]string) {
	tree := map[string]string{}
	for k, v := range s.metadata {
		tree[k] = v
	}
	if s.opts.Role != "" {
		tree[credsDir+"/"+s.opts.Role] = "" // a placeholder: the document is made when read
	}
	if v, ok := tree[path]; ok {
		if path == credsDir+"/"+s.opts.Role {
			return http.StatusOK, s.credentialDocument(now), nil
		}
		return http.StatusOK, v, nil
	}
	prefix := path + "/"
	if path == "" {
		prefix = ""
	}
	entries := map[string]bool{}
	for k := range tree {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			if first, _, dir := strings.Cut(rest, "/"); dir {
				entries[first+"/"] = true
			} else {
				entries[first] = true
			}
		}
	}
	if len(entries) == 0 {
		return http.StatusNotFound, "", nil // R8
	}
	list := make([]string, 0, len(entries))
	for e := range entries {
		list = append(list, e)
	}
	sort.Strings(list)
	return http.StatusOK, strings.Join(list, "\n"), nil
}

// credentialDocument serves the current credentials, made anew once the last ones come within RotateBefore of
// their expiry (R10).
func (s *Server) credentialDocument(now time.Time) string {
	if n := len(s.creds); n == 0 || !now.Before(s.creds[n-1].Expiration.Add(-s.opts.RotateBefore)) {
		id, secret, token := s.opts.NewCredentials(n)
		// Whole seconds: the document's times have no fraction.
		issued := now.UTC().Truncate(time.Second)
		s.creds = append(s.creds, Credentials{AccessKeyID: id, SecretAccessKey: secret, Token: token, Issued: issued, Expiration: issued.Add(s.opts.CredentialLifetime)})
	}
	c := s.creds[len(s.creds)-1]
	b, _ := json.MarshalIndent(map[string]string{ // strings only: never fails
		"Code": "Success", "LastUpdated": c.Issued.Format(time.RFC3339), "Type": "AWS-HMAC",
		"AccessKeyId": c.AccessKeyID, "SecretAccessKey": c.SecretAccessKey, "Token": c.Token,
		"Expiration": c.Expiration.Format(time.RFC3339),
	}, "", "  ")
	return string(b)
}
