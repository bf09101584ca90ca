// Package secretmanagerfake is a stateful Secret Manager REST server (v1) for tests: the calls the gcp backend
// makes through the real client (cloud.google.com/go/secretmanager/apiv1, NewRESTClient) and the one call a
// proxy VM makes with its own token, each body encoded and decoded with protojson into the client's own
// secretmanagerpb and iampb types, so the JSON is what the client reads. It enforces the documented rules
// listed in README.md, each with its source, and tells principals apart by their bearer token: a secret's
// version is read only by the provider's principal and by whom the secret's IAM policy grants the accessor
// role. The provider's principal holds every permission, or only Options.AdminPermissions when given.
package secretmanagerfake

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// AccessorRole is the predefined role that grants secretmanager.versions.access ("Access control with IAM").
const AccessorRole = "roles/secretmanager.secretAccessor"

// Options configure a fake.
type Options struct {
	// AdminToken is the bearer token of the provider's principal, which may do everything (it stands for a
	// principal with roles/secretmanager.admin on the project). Required.
	AdminToken string
	// AdminPermissions, when not nil, are all the provider's principal holds on the project (a custom role's
	// includedPermissions): a method whose permission is not among them is refused, PERMISSION_DENIED (S13).
	AdminPermissions []string
}

// Server is the fake. Its exported methods are safe for concurrent use with requests in flight.
type Server struct {
	URL string
	srv *httptest.Server

	mu    sync.Mutex
	admin string
	// adminPerms is Options.AdminPermissions, fixed at New: nil holds everything.
	adminPerms []string
	members    map[string]string // bearer token -> IAM member ("serviceAccount:EMAIL")
	secrets    map[string]*secret
	disabled   map[string]bool // projects where the API is not enabled (S15)
	log        []Request
}

type secret struct {
	pb       *secretmanagerpb.Secret
	versions []*version
	policy   *iampb.Policy
}

type version struct {
	pb   *secretmanagerpb.SecretVersion
	data []byte
}

// Request is one request the server received.
type Request struct {
	Method, Path, Member string
	Status               int
}

// New starts a fake on a loopback port. Close it when done.
func New(opts Options) *Server {
	if opts.AdminToken == "" {
		panic("secretmanagerfake: Options.AdminToken is required")
	}
	s := &Server{admin: opts.AdminToken, adminPerms: slices.Clone(opts.AdminPermissions), members: map[string]string{},
		secrets: map[string]*secret{}, disabled: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Handler serves the fake's API, for a test that serves it elsewhere too (in a guest's network namespace,
// over TLS, as the real endpoint is).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// ServiceAccountToken returns the bearer token requests of the service account email carry (as a VM's
// metadata server hands it out), registering it on first use.
func (s *Server) ServiceAccountToken(email string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	member := "serviceAccount:" + email
	for tok, m := range s.members {
		if m == member {
			return tok
		}
	}
	tok := fmt.Sprintf("ya29.fake-%x", fnv64(member))
	s.members[tok] = member
	return tok
}

// Secret returns a copy of the secret with the project ID and secret ID given, or nil.
func (s *Server) Secret(project, id string) *secretmanagerpb.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := s.secrets[key(project, id)]; sec != nil {
		return proto.CloneOf(sec.pb)
	}
	return nil
}

// Payloads returns the data of every version of the secret, oldest first (none when it does not exist).
func (s *Server) Payloads(project, id string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	if sec := s.secrets[key(project, id)]; sec != nil {
		for _, v := range sec.versions {
			out = append(out, slices.Clone(v.data))
		}
	}
	return out
}

// Secrets lists the IDs of the secrets of project.
func (s *Server) Secrets(project string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.secrets {
		if p, id, _ := strings.Cut(k, "/"); p == project {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// DisableAPI turns the API off on project, as on a project where Secret Manager was never enabled: every
// request naming it is refused (S15).
func (s *Server) DisableAPI(project string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disabled[project] = true
}

// Requests returns what the server received.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func key(project, id string) string { return project + "/" + id }

func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// projectNumber stands in for the project's number, which the API puts in the names it answers with (S12).
func projectNumber(project string) string {
	return strconv.FormatUint(100000000000+fnv64(project)%900000000000, 10)
}

// apiError is an error answer in the JSON form of Google's REST APIs: {"error": {code, message, status}},
// with details when there are (google.rpc.Status.details, each with its "@type").
type apiError struct {
	code    int
	status  string
	message string
	details []map[string]any
}

func newAPIError(code int, status, message string, details ...map[string]any) *apiError {
	return &apiError{code: code, status: status, message: message, details: details}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.code)
	body := map[string]any{"code": e.code, "message": e.message, "status": e.status}
	if len(e.details) > 0 {
		body["details"] = e.details
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": body})
}

// serviceDisabled is the answer on a project where the API is not enabled (S15): 403 PERMISSION_DENIED with
// an ErrorInfo of reason SERVICE_DISABLED ("google.api.ErrorReason", error_reason.proto).
func serviceDisabled(project string) *apiError {
	number := projectNumber(project)
	return newAPIError(http.StatusForbidden, "PERMISSION_DENIED",
		fmt.Sprintf("Secret Manager API has not been used in project %s before or it is disabled. Enable it by visiting "+
			"https://console.developers.google.com/apis/api/secretmanager.googleapis.com/overview?project=%s then retry. "+
			"If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry.", number, number),
		map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
			"metadata": map[string]string{"consumer": "projects/" + number, "service": "secretmanager.googleapis.com"}})
}

func invalid(format string, args ...any) *apiError {
	return newAPIError(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf(format, args...))
}

func notFound(format string, args ...any) *apiError {
	return newAPIError(http.StatusNotFound, "NOT_FOUND", fmt.Sprintf(format, args...))
}

// The route patterns of the methods served (the client's url_templates), the secret ID rule (S2) and a
// version's name: a number or the alias latest (S8).
var (
	projectRE  = regexp.MustCompile(`^/v1/projects/([^/:]+)/`)
	secretsRE  = regexp.MustCompile(`^/v1/projects/([^/:]+)/secrets$`)
	secretRE   = regexp.MustCompile(`^/v1/projects/([^/:]+)/secrets/([^/:]+)(:addVersion|:setIamPolicy|:getIamPolicy)?$`)
	versionRE  = regexp.MustCompile(`^/v1/projects/([^/:]+)/secrets/([^/:]+)/versions/([^/:]+):access$`)
	secretIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	labelKeyRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
)

// maxPayload is the largest secret data the API accepts (S6).
const maxPayload = 64 * 1024

type response struct {
	http.ResponseWriter
	status int
}

func (r *response) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rw := &response{ResponseWriter: w, status: http.StatusOK}
	member := s.authenticate(r)
	defer func() {
		s.mu.Lock()
		s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Member: member, Status: rw.status})
		s.mu.Unlock()
	}()
	if member == "" {
		writeError(rw, newAPIError(http.StatusUnauthorized, "UNAUTHENTICATED",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."))
		return
	}
	ints := strings.Contains(r.URL.Query().Get("$alt"), "enum-encoding=int")
	var out proto.Message
	var e *apiError
	switch p := r.URL.Path; {
	case projectRE.MatchString(p) && s.apiDisabled(projectRE.FindStringSubmatch(p)[1]):
		e = serviceDisabled(projectRE.FindStringSubmatch(p)[1])
	case secretsRE.MatchString(p) && r.Method == http.MethodPost:
		out, e = s.createSecret(r, member, secretsRE.FindStringSubmatch(p)[1])
	case secretsRE.MatchString(p) && r.Method == http.MethodGet:
		out, e = s.listSecrets(r, member, secretsRE.FindStringSubmatch(p)[1])
	case versionRE.MatchString(p) && r.Method == http.MethodGet:
		m := versionRE.FindStringSubmatch(p)
		out, e = s.access(member, m[1], m[2], m[3])
	case secretRE.MatchString(p):
		m := secretRE.FindStringSubmatch(p)
		switch verb := m[3]; {
		case verb == "" && r.Method == http.MethodGet:
			out, e = s.getSecret(member, m[1], m[2])
		case verb == "" && r.Method == http.MethodDelete:
			out, e = s.deleteSecret(r, member, m[1], m[2])
		case verb == ":addVersion" && r.Method == http.MethodPost:
			out, e = s.addVersion(r, member, m[1], m[2])
		case verb == ":setIamPolicy" && r.Method == http.MethodPost:
			out, e = s.setIamPolicy(r, member, m[1], m[2])
		case verb == ":getIamPolicy" && (r.Method == http.MethodGet || r.Method == http.MethodPost):
			out, e = s.getIamPolicy(member, m[1], m[2])
		default:
			e = newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", "the fake does not serve "+r.Method+" "+p)
		}
	default:
		e = notFound("The requested URL %s was not found on this server.", p)
	}
	if e != nil {
		writeError(rw, e)
		return
	}
	b, err := protojson.MarshalOptions{UseEnumNumbers: ints}.Marshal(out)
	if err != nil {
		writeError(rw, newAPIError(http.StatusInternalServerError, "INTERNAL", err.Error()))
		return
	}
	rw.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = rw.Write(b)
}

func (s *Server) apiDisabled(project string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disabled[project]
}

// authenticate names the request's principal from its bearer token: "admin" for the provider's, the IAM
// member of a service account's, "" for none or an unknown one (S1).
func (s *Server) authenticate(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok == s.admin {
		return "admin"
	}
	return s.members[tok]
}

// adminMay says whether member is the provider's principal and holds permission on the project (S13).
func (s *Server) adminMay(member, permission string) bool {
	return member == "admin" && (s.adminPerms == nil || slices.Contains(s.adminPerms, permission))
}

// denied is the answer to a principal without the permission (S9): the API does not say whether the
// resource exists.
func denied(permission, resource string) *apiError {
	return newAPIError(http.StatusForbidden, "PERMISSION_DENIED",
		fmt.Sprintf("Permission '%s' denied for resource '%s' (or it may not exist).", permission, resource))
}

// readBody decodes the request body into m, refusing fields its type does not have (S11).
func readBody(r *http.Request, m proto.Message) *apiError {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return invalid("reading the body: %v", err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return invalid("Invalid JSON payload received. %v", err)
	}
	return nil
}

func (s *Server) createSecret(r *http.Request, member, project string) (proto.Message, *apiError) {
	id := r.URL.Query().Get("secretId")
	if !s.adminMay(member, "secretmanager.secrets.create") {
		return nil, denied("secretmanager.secrets.create", "projects/"+project)
	}
	in := &secretmanagerpb.Secret{}
	if e := readBody(r, in); e != nil {
		return nil, e
	}
	if !secretIDRE.MatchString(id) {
		return nil, invalid("Secret ID [%s] must be at most 255 characters of letters, numerals, hyphens and underscores.", id)
	}
	if in.GetReplication().GetReplication() == nil {
		return nil, invalid("Secret.replication is required.")
	}
	if e := checkLabels(in.GetLabels()); e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(project, id)
	if s.secrets[k] != nil {
		return nil, newAPIError(http.StatusConflict, "ALREADY_EXISTS",
			fmt.Sprintf("Secret [projects/%s/secrets/%s] already exists.", projectNumber(project), id))
	}
	sec := &secretmanagerpb.Secret{
		Name: fmt.Sprintf("projects/%s/secrets/%s", projectNumber(project), id), Replication: in.GetReplication(),
		Labels: in.GetLabels(), CreateTime: timestamppb.Now(), Etag: etag(),
	}
	s.secrets[k] = &secret{pb: sec, policy: &iampb.Policy{Version: 1, Etag: []byte(etag())}}
	return sec, nil
}

// checkLabels is S4.
func checkLabels(labels map[string]string) *apiError {
	if len(labels) > 64 {
		return invalid("A secret may have no more than 64 labels; %d given.", len(labels))
	}
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) || !labelValRE.MatchString(v) {
			return invalid("Label %q=%q does not match the label key and value rules.", k, v)
		}
	}
	return nil
}

func etag() string { return strconv.Quote(strconv.FormatInt(time.Now().UnixNano(), 36)) }

// lookup finds a secret for member, who must be the admin: a service account learns nothing of it (S9).
// The caller holds s.mu.
func (s *Server) lookup(member, permission, project, id string) (*secret, *apiError) {
	if !s.adminMay(member, permission) {
		return nil, denied(permission, fmt.Sprintf("projects/%s/secrets/%s", project, id))
	}
	sec := s.secrets[key(project, id)]
	if sec == nil {
		return nil, notFound("Secret [projects/%s/secrets/%s] not found or has no versions.", projectNumber(project), id)
	}
	return sec, nil
}

func (s *Server) getSecret(member, project, id string) (proto.Message, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, e := s.lookup(member, "secretmanager.secrets.get", project, id)
	if e != nil {
		return nil, e
	}
	return sec.pb, nil
}

// deleteSecret deletes the secret with its versions (S10); an etag, when given, must be the secret's.
func (s *Server) deleteSecret(r *http.Request, member, project, id string) (proto.Message, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, e := s.lookup(member, "secretmanager.secrets.delete", project, id)
	if e != nil {
		return nil, e
	}
	if tag := r.URL.Query().Get("etag"); tag != "" && tag != sec.pb.GetEtag() {
		return nil, newAPIError(http.StatusConflict, "ABORTED", "The etag provided does not match the current etag of the secret.")
	}
	delete(s.secrets, key(project, id))
	return &emptypb.Empty{}, nil
}

func (s *Server) addVersion(r *http.Request, member, project, id string) (proto.Message, *apiError) {
	in := &secretmanagerpb.AddSecretVersionRequest{}
	if e := readBody(r, in); e != nil {
		return nil, e
	}
	data := in.GetPayload().GetData()
	if len(data) > maxPayload {
		return nil, invalid("Secret payload is %d bytes; it must be no larger than 64KiB.", len(data))
	}
	sum := int64(crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	if in.GetPayload().DataCrc32C != nil && in.GetPayload().GetDataCrc32C() != sum {
		return nil, invalid("Checksum mismatch: data_crc32c does not match the payload.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, e := s.lookup(member, "secretmanager.versions.add", project, id)
	if e != nil {
		return nil, e
	}
	v := &secretmanagerpb.SecretVersion{
		Name:       fmt.Sprintf("%s/versions/%d", sec.pb.GetName(), len(sec.versions)+1),
		CreateTime: timestamppb.Now(), State: secretmanagerpb.SecretVersion_ENABLED, Etag: etag(),
		ClientSpecifiedPayloadChecksum: in.GetPayload().DataCrc32C != nil,
	}
	sec.versions = append(sec.versions, &version{pb: v, data: slices.Clone(data)})
	return v, nil
}

// access answers a version's payload with its CRC32C (S7) to the admin and to members the secret's policy
// grants the accessor role (S9); latest is the most recently created version (S8).
func (s *Server) access(member, project, id, ver string) (proto.Message, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resource := fmt.Sprintf("projects/%s/secrets/%s/versions/%s", project, id, ver)
	sec := s.secrets[key(project, id)]
	if !s.adminMay(member, "secretmanager.versions.access") && (sec == nil || !grants(sec.policy, AccessorRole, member)) {
		return nil, denied("secretmanager.versions.access", resource)
	}
	if sec == nil {
		return nil, notFound("Secret [projects/%s/secrets/%s] not found or has no versions.", projectNumber(project), id)
	}
	n := len(sec.versions)
	if ver != "latest" {
		var err error
		if n, err = strconv.Atoi(ver); err != nil || n < 1 {
			return nil, invalid("Invalid version [%s]: a version is a positive number or latest.", ver)
		}
	}
	if n < 1 || n > len(sec.versions) {
		return nil, notFound("Secret Version [%s/versions/%s] not found.", sec.pb.GetName(), ver)
	}
	v := sec.versions[n-1]
	sum := int64(crc32.Checksum(v.data, crc32.MakeTable(crc32.Castagnoli)))
	return &secretmanagerpb.AccessSecretVersionResponse{
		Name: v.pb.GetName(), Payload: &secretmanagerpb.SecretPayload{Data: v.data, DataCrc32C: &sum},
	}, nil
}

func grants(p *iampb.Policy, role, member string) bool {
	for _, b := range p.GetBindings() {
		if b.GetRole() == role && slices.Contains(b.GetMembers(), member) {
			return true
		}
	}
	return false
}

// setIamPolicy replaces the secret's policy; a policy carrying an etag must carry the current one (S10).
func (s *Server) setIamPolicy(r *http.Request, member, project, id string) (proto.Message, *apiError) {
	in := &iampb.SetIamPolicyRequest{}
	if e := readBody(r, in); e != nil {
		return nil, e
	}
	for _, b := range in.GetPolicy().GetBindings() {
		for _, m := range b.GetMembers() {
			if !strings.Contains(m, ":") {
				return nil, invalid("Invalid member %q: a member is user:, serviceAccount:, group: or domain: and its name.", m)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, e := s.lookup(member, "secretmanager.secrets.setIamPolicy", project, id)
	if e != nil {
		return nil, e
	}
	if tag := in.GetPolicy().GetEtag(); len(tag) > 0 && string(tag) != string(sec.policy.GetEtag()) {
		return nil, newAPIError(http.StatusConflict, "ABORTED", "There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff.")
	}
	p := proto.CloneOf(in.GetPolicy())
	p.Etag = []byte(etag())
	sec.policy = p
	return p, nil
}

func (s *Server) getIamPolicy(member, project, id string) (proto.Message, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, e := s.lookup(member, "secretmanager.secrets.getIamPolicy", project, id)
	if e != nil {
		return nil, e
	}
	return sec.policy, nil
}
