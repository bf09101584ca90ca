package ec2fake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// IAM's Query API ("AWS Identity and Access Management API Reference"): a form POST with Version
// 2010-05-08 to the one global endpoint, signed for the service iam in us-east-1 whatever the caller's
// region ("AWS Identity and Access Management endpoints and quotas": iam.amazonaws.com, us-east-1), answered
// with <ActionResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ActionResult>...</ActionResult>
// <ResponseMetadata/></ActionResponse>; lists as <member> elements; errors as STS's, in IAM's namespace.
// Only the roles and instance profiles the aws backend makes for a proxy are served (R56 to R62): the account's
// other roles are Options.Roles, which the API does not list.

const (
	iamVersion   = "2010-05-08"
	iamNamespace = "https://iam.amazonaws.com/doc/2010-05-08/"
	// IAMSigningRegion is the region IAM's global endpoint is signed for (R56).
	IAMSigningRegion = "us-east-1"
)

// Defaults of IAM's quotas ("IAM and AWS STS quotas": roles and instance profiles per account, 1,000 each,
// adjustable; one role per instance profile; inline policies of a role, 10,240 characters together; a
// trust policy, 2,048 characters; 50 tags per entity).
const (
	DefaultMaxRoles            = 1000
	DefaultMaxInstanceProfiles = 1000
	maxRolePolicySize          = 10240
	maxTrustPolicySize         = 2048
	maxIAMTags                 = 50
)

type iamHandler func(s *Server, c *call) (any, *apiError)

// iamActions are the IAM actions the fake serves; any other is InvalidAction.
var iamActions = map[string]iamHandler{
	"CreateRole":                    (*Server).iamCreateRole,
	"GetRole":                       (*Server).iamGetRole,
	"TagRole":                       (*Server).iamTagRole,
	"PutRolePolicy":                 (*Server).iamPutRolePolicy,
	"DeleteRolePolicy":              (*Server).iamDeleteRolePolicy,
	"DeleteRole":                    (*Server).iamDeleteRole,
	"CreateInstanceProfile":         (*Server).iamCreateInstanceProfile,
	"GetInstanceProfile":            (*Server).iamGetInstanceProfile,
	"AddRoleToInstanceProfile":      (*Server).iamAddRoleToInstanceProfile,
	"RemoveRoleFromInstanceProfile": (*Server).iamRemoveRoleFromInstanceProfile,
	"DeleteInstanceProfile":         (*Server).iamDeleteInstanceProfile,
}

// iamParams are, for each served action, the top-level parameters the SDK's serializer can send (its
// request snapshot, request_snapshot/<Action>.request.snap in the module; TestIAMWireMatchesSDK holds the two
// together). iamNotModelled are those among them the fake does not model, where ignoring one would change the
// answer: 501 NotImplemented (R56).
var (
	iamParams = map[string][]string{
		"CreateRole":                    {"AssumeRolePolicyDocument", "Description", "MaxSessionDuration", "Path", "PermissionsBoundary", "RoleName", "Tags"},
		"GetRole":                       {"RoleName"},
		"TagRole":                       {"RoleName", "Tags"},
		"PutRolePolicy":                 {"PolicyDocument", "PolicyName", "RoleName"},
		"DeleteRolePolicy":              {"PolicyName", "RoleName"},
		"DeleteRole":                    {"RoleName"},
		"CreateInstanceProfile":         {"InstanceProfileName", "Path", "Tags"},
		"GetInstanceProfile":            {"InstanceProfileName"},
		"AddRoleToInstanceProfile":      {"InstanceProfileName", "RoleName"},
		"RemoveRoleFromInstanceProfile": {"InstanceProfileName", "RoleName"},
		"DeleteInstanceProfile":         {"InstanceProfileName"},
	}
	iamNotModelled = map[string][]string{"CreateRole": {"PermissionsBoundary"}}
)

// iamRole is a role made through the API.
type iamRole struct {
	name, path, id     string
	created            time.Time
	trust, description string
	maxSession         int
	tags               map[string]string
	// policies are the inline policies as written, by name; parsed as the evaluator reads them.
	policies map[string]string
	parsed   map[string]policyDocument
}

// iamProfile is an instance profile made through the API.
type iamProfile struct {
	name, path, id string
	created        time.Time
	roles          []string // role names, at most one
	tags           map[string]string
}

// iamState is the account's IAM: global, not a region's. Names are unique case-insensitively ("IAM
// identifiers": "names are not distinguished by case"), so the maps are keyed by the lowercase name.
type iamState struct {
	roles    map[string]*iamRole
	profiles map[string]*iamProfile
}

func (s *Server) iamState() *iamState {
	if s.iam == nil {
		s.iam = &iamState{roles: map[string]*iamRole{}, profiles: map[string]*iamProfile{}}
	}
	return s.iam
}

func (s *Server) roleARNOf(r *iamRole) string {
	return "arn:aws:iam::" + s.opts.AccountID + ":role" + r.path + r.name
}

func (s *Server) profileARNOf(p *iamProfile) string {
	return "arn:aws:iam::" + s.opts.AccountID + ":instance-profile" + p.path + p.name
}

// iamErr is IAM's error: its code and HTTP status ("IAM API Reference": each action's Errors, and Common
// Errors).
func iamErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	switch code {
	case "NoSuchEntity":
		status = http.StatusNotFound
	case "EntityAlreadyExists", "DeleteConflict", "LimitExceeded", "ConcurrentModification":
		status = http.StatusConflict
	case "AccessDenied", "InvalidClientTokenId", "SignatureDoesNotMatch", "MissingAuthenticationToken", "ExpiredToken":
		status = http.StatusForbidden
	case "ServiceFailure":
		status = http.StatusInternalServerError
	case "NotImplemented":
		status = http.StatusNotImplemented
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// checkIAMAction refuses an action IAM has not or the fake does not serve, a parameter its SDK serializer
// cannot send (InvalidParameter... IAM answers an unknown one as a validation error) or one the fake does not
// model, and a request its caller's policies do not allow (R56, R61). The caller holds s.mu.
func (s *Server) checkIAMAction(c *call) *apiError {
	if _, ok := iamActions[c.action]; !ok {
		return iamErr("InvalidAction", "Could not find operation %s for version %s", c.action, iamVersion)
	}
	for name := range c.form.v {
		top, _, _ := strings.Cut(name, ".")
		if top == "Action" || top == "Version" {
			continue
		}
		if !slices.Contains(iamParams[c.action], top) {
			return iamErr("ValidationError", "1 validation error detected: Unknown parameter %s", top)
		}
		if slices.Contains(iamNotModelled[c.action], top) {
			return iamErr("NotImplemented", "ec2fake does not model parameter %s of %s", top, c.action)
		}
	}
	return s.authorizeRequests(c, s.iamAuthorizations(c))
}

// Names ("IAM API Reference": RoleName, InstanceProfileName, PolicyName, Path; "IAM and AWS STS quotas",
// IAM name and ID quotas): a role 1 to 64 characters, an instance profile and a policy 1 to 128, each of
// [\w+=,.@-]; a path "/" or 1 to 512 characters that start and end with "/", of ! to ~.
var (
	iamNameRE = regexp.MustCompile(`^[\w+=,.@-]+$`)
	iamPathRE = regexp.MustCompile(`^(/|/[\x21-\x7e]*/)$`)
)

// validation is IAM's ValidationError of one or more violated constraints, in STS's words (R37): "N
// validation error(s) detected: Value 'x' at 'roleName' failed to satisfy constraint: Member must ...".
type validation []string

func (v *validation) constraint(value, member, rule string) {
	*v = append(*v, fmt.Sprintf("Value '%s' at '%s' failed to satisfy constraint: Member must %s", value, member, rule))
}

func (v *validation) name(value, member string, maxLen int) {
	switch {
	case len(value) < 1:
		v.constraint(value, member, "have length greater than or equal to 1")
	case len(value) > maxLen:
		v.constraint(value, member, fmt.Sprintf("have length less than or equal to %d", maxLen))
	}
	if value != "" && !iamNameRE.MatchString(value) {
		v.constraint(value, member, `satisfy regular expression pattern: [\w+=,.@-]+`)
	}
}

func (v *validation) path(f form) string {
	if !f.has("Path") {
		return "/"
	}
	p := f.str("Path")
	if len(p) > 512 {
		v.constraint(p, "path", "have length less than or equal to 512")
	}
	if !iamPathRE.MatchString(p) {
		v.constraint(p, "path", `satisfy regular expression pattern: (\u002F)|(\u002F[\u0021-\u007E]+\u002F)`)
	}
	return p
}

func (v validation) err() *apiError {
	if len(v) == 0 {
		return nil
	}
	what := "1 validation error detected: "
	if len(v) > 1 {
		what = fmt.Sprintf("%d validation errors detected: ", len(v))
	}
	return iamErr("ValidationError", "%s", what+strings.Join(v, "; "))
}

// iamTags reads Tags.member.N.Key/Value: at most 50 ("LimitExceeded"), keys 1 to 128 and values up to 256
// characters, keys unique and not aws: (InvalidInput) ("IAM API Reference": Tag; "Tagging IAM resources",
// Rules for tagging).
func iamTags(f form) (map[string]string, *apiError) {
	tags := map[string]string{}
	for _, n := range f.indexes("Tags.member") {
		k, val := f.str(fmt.Sprintf("Tags.member.%d.Key", n)), f.str(fmt.Sprintf("Tags.member.%d.Value", n))
		switch _, dup := tags[k]; {
		case len(k) < 1 || len(k) > 128 || len(val) > 256:
			return nil, iamErr("InvalidInput", "Tag keys are 1 to 128 characters and values at most 256: %q", k)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, iamErr("InvalidInput", "User-provided tag keys cannot start with the prefix 'aws:'")
		case dup:
			return nil, iamErr("InvalidInput", "Duplicate tag keys found. Please note that Tag keys are case insensitive.")
		}
		tags[k] = val
	}
	if len(tags) > maxIAMTags {
		return nil, iamErr("LimitExceeded", "The number of tags has reached the maximum limit.")
	}
	return tags, nil
}

// policyChars is the size IAM counts against its policy quotas: the characters of the document but white
// space ("IAM and AWS STS quotas": "IAM doesn't count white space when calculating the size of a policy").
func policyChars(doc string) int {
	n := 0
	for _, r := range doc {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}

// trustPolicy is a role's trust policy, as far as the fake reads one: who may assume the role.
type trustPolicy struct {
	Version   string
	Statement []struct {
		Sid       string
		Effect    string
		Principal struct {
			Service stringList
			AWS     stringList
		}
		Action    stringList
		Condition json.RawMessage
	}
}

// parseTrust reads a trust policy: JSON with Statement, each with Effect, Principal and Action, or
// MalformedPolicyDocument (R58).
func parseTrust(doc string) (trustPolicy, *apiError) {
	var t trustPolicy
	if err := json.Unmarshal([]byte(doc), &t); err != nil || len(t.Statement) == 0 {
		return t, iamErr("MalformedPolicyDocument", "This policy contains invalid Json")
	}
	for _, st := range t.Statement {
		if st.Effect != "Allow" && st.Effect != "Deny" || len(st.Action) == 0 {
			return t, iamErr("MalformedPolicyDocument", "Syntax errors in policy.")
		}
		if len(st.Principal.Service) == 0 && len(st.Principal.AWS) == 0 {
			return t, iamErr("MalformedPolicyDocument", "Has prohibited field Resource or no principal.")
		}
	}
	return t, nil
}

// trusts reports whether t lets service assume the role: an Allow of sts:AssumeRole (or sts:*) to it, no
// Deny, and no condition (which the fake does not evaluate: a conditional statement does not count).
func (t trustPolicy) trusts(service string) bool {
	allowed := false
	for _, st := range t.Statement {
		if !slices.Contains(st.Principal.Service, service) ||
			!policyAnyMatch(st.Action, func(a string) bool { return iamWildcard(strings.ToLower(a), "sts:assumerole") }) {
			continue
		}
		if st.Effect == "Deny" {
			return false
		}
		allowed = allowed || len(st.Condition) == 0 || string(st.Condition) == "null" || string(st.Condition) == "{}"
	}
	return allowed
}

// uniqueID is IAM's unique id of an entity: a prefix (AROA for a role, AIPA for an instance profile) and 17
// characters ("IAM identifiers": Unique identifiers).
func uniqueID(prefix, name string, seq uint64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", name, seq))
	return prefix + strings.ToUpper(hex.EncodeToString(sum[:]))[:17]
}

// iamCreateRole: a role of a name unique in the account, with its trust policy (R57, R58, R60).
func (s *Server) iamCreateRole(c *call) (any, *apiError) {
	f := c.form
	var v validation
	name := f.str("RoleName")
	v.name(name, "roleName", 64)
	path := v.path(f)
	trust := f.str("AssumeRolePolicyDocument")
	if trust == "" {
		v.constraint(trust, "assumeRolePolicyDocument", "have length greater than or equal to 1")
	}
	maxSession := 3600
	if f.has("MaxSessionDuration") {
		n, err := strconv.Atoi(f.str("MaxSessionDuration"))
		if err != nil || n < 3600 || n > 43200 {
			v.constraint(f.str("MaxSessionDuration"), "maxSessionDuration", "have value between 3600 and 43200")
		}
		maxSession = n
	}
	if len(f.str("Description")) > 1000 {
		v.constraint(f.str("Description"), "description", "have length less than or equal to 1000")
	}
	if e := v.err(); e != nil {
		return nil, e
	}
	tags, e := iamTags(f)
	if e != nil {
		return nil, e
	}
	if _, e := parseTrust(trust); e != nil {
		return nil, e
	}
	if policyChars(trust) > maxTrustPolicySize {
		return nil, iamErr("LimitExceeded", "Cannot exceed quota for ACLSizePerRole: %d", maxTrustPolicySize)
	}
	st := s.iamState()
	if st.roles[strings.ToLower(name)] != nil {
		return nil, iamErr("EntityAlreadyExists", "Role with name %s already exists.", name)
	}
	if len(st.roles) >= s.maxRoles() {
		return nil, iamErr("LimitExceeded", "Cannot exceed quota for RolesPerAccount: %d", s.maxRoles())
	}
	s.seq++
	r := &iamRole{name: name, path: path, id: uniqueID("AROA", name, s.seq), created: s.now(), trust: trust,
		description: f.str("Description"), maxSession: maxSession, tags: tags, policies: map[string]string{}, parsed: map[string]policyDocument{}}
	st.roles[strings.ToLower(name)] = r
	return &iamRoleResult{Role: s.roleXML(r)}, nil
}

func (s *Server) maxRoles() int { return quota(s.opts.MaxRoles, DefaultMaxRoles) }

func (s *Server) maxInstanceProfiles() int {
	return quota(s.opts.MaxInstanceProfiles, DefaultMaxInstanceProfiles)
}

// quota is an Options quota: 0 takes the default, a negative value is a quota of none.
func quota(set, def int) int {
	switch {
	case set == 0:
		return def
	case set < 0:
		return 0
	}
	return set
}

// role finds the role a request names, or answers NoSuchEntity (R59).
func (s *Server) role(f form) (*iamRole, *apiError) {
	var v validation
	name := f.str("RoleName")
	v.name(name, "roleName", 64)
	if e := v.err(); e != nil {
		return nil, e
	}
	r := s.iamState().roles[strings.ToLower(name)]
	if r == nil {
		return nil, iamErr("NoSuchEntity", "The role with name %s cannot be found.", name)
	}
	return r, nil
}

func (s *Server) profile(f form) (*iamProfile, *apiError) {
	var v validation
	name := f.str("InstanceProfileName")
	v.name(name, "instanceProfileName", 128)
	if e := v.err(); e != nil {
		return nil, e
	}
	p := s.iamState().profiles[strings.ToLower(name)]
	if p == nil {
		return nil, iamErr("NoSuchEntity", "Instance Profile %s cannot be found.", name)
	}
	return p, nil
}

func (s *Server) iamGetRole(c *call) (any, *apiError) {
	r, e := s.role(c.form)
	if e != nil {
		return nil, e
	}
	return &iamRoleResult{Role: s.roleXML(r)}, nil
}

// iamTagRole adds tags to a role, overwriting a key it has, at most 50 in all (R60).
func (s *Server) iamTagRole(c *call) (any, *apiError) {
	r, e := s.role(c.form)
	if e != nil {
		return nil, e
	}
	tags, e := iamTags(c.form)
	if e != nil {
		return nil, e
	}
	merged := mergeTags(copyTags(r.tags), tags)
	if len(merged) > maxIAMTags {
		return nil, iamErr("LimitExceeded", "The number of tags has reached the maximum limit.")
	}
	r.tags = merged
	return &struct{}{}, nil
}

// iamPutRolePolicy adds or replaces an inline policy of a role: a JSON policy the evaluator models (R51's
// subset; another is 501 NotImplemented, an invalid one MalformedPolicyDocument), the role's inline policies
// at most 10,240 characters together, white space not counted (R58).
func (s *Server) iamPutRolePolicy(c *call) (any, *apiError) {
	f := c.form
	var v validation
	v.name(f.str("PolicyName"), "policyName", 128)
	if f.str("PolicyDocument") == "" {
		v.constraint("", "policyDocument", "have length greater than or equal to 1")
	}
	if e := v.err(); e != nil {
		return nil, e
	}
	r, e := s.role(f)
	if e != nil {
		return nil, e
	}
	doc := f.str("PolicyDocument")
	if !json.Valid([]byte(doc)) {
		return nil, iamErr("MalformedPolicyDocument", "This policy contains invalid Json")
	}
	parsed, err := parsePolicy(doc)
	if err != nil {
		return nil, iamErr("NotImplemented", "ec2fake does not model this policy: %v", err)
	}
	size := policyChars(doc)
	for name, other := range r.policies {
		if !strings.EqualFold(name, f.str("PolicyName")) {
			size += policyChars(other)
		}
	}
	if size > maxRolePolicySize {
		return nil, iamErr("LimitExceeded", "Maximum policy size of %d bytes exceeded for role %s", maxRolePolicySize, r.name)
	}
	for name := range r.policies {
		if strings.EqualFold(name, f.str("PolicyName")) {
			delete(r.policies, name)
			delete(r.parsed, name)
		}
	}
	r.policies[f.str("PolicyName")] = doc
	r.parsed[f.str("PolicyName")] = parsed
	return &struct{}{}, nil
}

func (s *Server) iamDeleteRolePolicy(c *call) (any, *apiError) {
	r, e := s.role(c.form)
	if e != nil {
		return nil, e
	}
	name := c.form.str("PolicyName")
	for n := range r.policies {
		if strings.EqualFold(n, name) {
			delete(r.policies, n)
			delete(r.parsed, n)
			return &struct{}{}, nil
		}
	}
	return nil, iamErr("NoSuchEntity", "The role policy with name %s cannot be found.", name)
}

// iamDeleteRole: only a role without inline policies and in no instance profile (R59).
func (s *Server) iamDeleteRole(c *call) (any, *apiError) {
	r, e := s.role(c.form)
	if e != nil {
		return nil, e
	}
	if len(r.policies) > 0 {
		return nil, iamErr("DeleteConflict", "Cannot delete entity, must delete policies first.")
	}
	st := s.iamState()
	for _, p := range st.profiles {
		if slices.ContainsFunc(p.roles, func(n string) bool { return strings.EqualFold(n, r.name) }) {
			return nil, iamErr("DeleteConflict", "Cannot delete entity, must remove roles from instance profile first.")
		}
	}
	delete(st.roles, strings.ToLower(r.name))
	return &struct{}{}, nil
}

// iamCreateInstanceProfile: a profile of a name unique in the account, without a role (R57, R60). Made
// moments ago, it is unknown to Timing.UnseenProfileLaunches launches (R62).
func (s *Server) iamCreateInstanceProfile(c *call) (any, *apiError) {
	f := c.form
	var v validation
	name := f.str("InstanceProfileName")
	v.name(name, "instanceProfileName", 128)
	path := v.path(f)
	if e := v.err(); e != nil {
		return nil, e
	}
	tags, e := iamTags(f)
	if e != nil {
		return nil, e
	}
	st := s.iamState()
	if st.profiles[strings.ToLower(name)] != nil {
		return nil, iamErr("EntityAlreadyExists", "Instance Profile %s already exists.", name)
	}
	if len(st.profiles) >= s.maxInstanceProfiles() {
		return nil, iamErr("LimitExceeded", "Cannot exceed quota for InstanceProfilesPerAccount: %d", s.maxInstanceProfiles())
	}
	s.seq++
	p := &iamProfile{name: name, path: path, id: uniqueID("AIPA", name, s.seq), created: s.now(), tags: tags}
	st.profiles[strings.ToLower(name)] = p
	if n := s.timing.UnseenProfileLaunches; n > 0 {
		if s.newProfiles == nil {
			s.newProfiles = map[string]int{}
		}
		s.newProfiles[name] = n
		s.newProfiles[s.profileARNOf(p)] = n
	}
	return &iamProfileResult{InstanceProfile: s.profileXML(p)}, nil
}

func (s *Server) iamGetInstanceProfile(c *call) (any, *apiError) {
	p, e := s.profile(c.form)
	if e != nil {
		return nil, e
	}
	return &iamProfileResult{InstanceProfile: s.profileXML(p)}, nil
}

// iamAddRoleToInstanceProfile: a profile holds one role ("LimitExceeded": InstanceSessionsPerInstanceProfile,
// which cannot be increased), the same one again included (R60).
func (s *Server) iamAddRoleToInstanceProfile(c *call) (any, *apiError) {
	p, e := s.profile(c.form)
	if e != nil {
		return nil, e
	}
	r, e := s.role(c.form)
	if e != nil {
		return nil, e
	}
	if len(p.roles) > 0 {
		return nil, iamErr("LimitExceeded", "Cannot exceed quota for InstanceSessionsPerInstanceProfile: 1")
	}
	p.roles = []string{r.name}
	return &struct{}{}, nil
}

func (s *Server) iamRemoveRoleFromInstanceProfile(c *call) (any, *apiError) {
	p, e := s.profile(c.form)
	if e != nil {
		return nil, e
	}
	name := c.form.str("RoleName")
	i := slices.IndexFunc(p.roles, func(n string) bool { return strings.EqualFold(n, name) })
	if i < 0 {
		return nil, iamErr("NoSuchEntity", "The role with name %s cannot be found.", name)
	}
	p.roles = slices.Delete(p.roles, i, i+1)
	return &struct{}{}, nil
}

// iamDeleteInstanceProfile: only a profile that holds no role (R59).
func (s *Server) iamDeleteInstanceProfile(c *call) (any, *apiError) {
	p, e := s.profile(c.form)
	if e != nil {
		return nil, e
	}
	if len(p.roles) > 0 {
		return nil, iamErr("DeleteConflict", "Cannot delete entity, must remove roles from instance profile first.")
	}
	delete(s.iamState().profiles, strings.ToLower(p.name))
	return &struct{}{}, nil
}

// The answers' XML, element by element as the SDK's response snapshots name them (TestIAMWireMatchesSDK).

type iamTagXML struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type iamRoleXML struct {
	Path                     string      `xml:"Path"`
	RoleName                 string      `xml:"RoleName"`
	RoleID                   string      `xml:"RoleId"`
	Arn                      string      `xml:"Arn"`
	CreateDate               string      `xml:"CreateDate"`
	AssumeRolePolicyDocument string      `xml:"AssumeRolePolicyDocument"`
	Description              string      `xml:"Description,omitempty"`
	MaxSessionDuration       int         `xml:"MaxSessionDuration"`
	Tags                     []iamTagXML `xml:"Tags>member"`
}

type iamRoleResult struct {
	Role iamRoleXML `xml:"Role"`
}

type iamInstanceProfileXML struct {
	Path                string       `xml:"Path"`
	InstanceProfileName string       `xml:"InstanceProfileName"`
	InstanceProfileID   string       `xml:"InstanceProfileId"`
	Arn                 string       `xml:"Arn"`
	CreateDate          string       `xml:"CreateDate"`
	Roles               []iamRoleXML `xml:"Roles>member"`
	Tags                []iamTagXML  `xml:"Tags>member"`
}

type iamProfileResult struct {
	InstanceProfile iamInstanceProfileXML `xml:"InstanceProfile"`
}

func iamTagList(tags map[string]string) []iamTagXML {
	out := []iamTagXML{}
	for _, k := range sortedKeys(tags) {
		out = append(out, iamTagXML{k, tags[k]})
	}
	return out
}

// roleXML answers a role: its trust policy URL-encoded, as IAM answers policy documents ("IAM API
// Reference": Role, AssumeRolePolicyDocument: "A policy document, URL-encoded compliant with RFC 3986").
func (s *Server) roleXML(r *iamRole) iamRoleXML {
	return iamRoleXML{Path: r.path, RoleName: r.name, RoleID: r.id, Arn: s.roleARNOf(r), CreateDate: r.created.UTC().Format(time.RFC3339),
		AssumeRolePolicyDocument: strings.ReplaceAll(url.QueryEscape(r.trust), "+", "%20"), Description: r.description,
		MaxSessionDuration: r.maxSession, Tags: iamTagList(r.tags)}
}

// profileXML answers a profile with its role, whose tags IAM leaves out there.
func (s *Server) profileXML(p *iamProfile) iamInstanceProfileXML {
	x := iamInstanceProfileXML{Path: p.path, InstanceProfileName: p.name, InstanceProfileID: p.id, Arn: s.profileARNOf(p),
		CreateDate: p.created.UTC().Format(time.RFC3339), Roles: []iamRoleXML{}, Tags: iamTagList(p.tags)}
	for _, n := range p.roles {
		if r := s.iamState().roles[strings.ToLower(n)]; r != nil {
			rx := s.roleXML(r)
			rx.Tags = nil
			x.Roles = append(x.Roles, rx)
		}
	}
	return x
}

// iamAuthorizations are what an IAM request needs allowed (R61): its action on the role or instance profile
// it names, arn:aws:iam::<account>:role<path><name> (instance-profile likewise), the path the entity's own
// or, for one that does not exist yet, the request's (a missing entity's "/"); an entity's tags as
// aws:ResourceTag/<key> and iam:ResourceTag/<key>; a create's Tags as aws:RequestTag/<key>, which also need
// iam:TagRole or iam:TagInstanceProfile; AddRoleToInstanceProfile also iam:PassRole on the role. The caller
// holds s.mu.
func (s *Server) iamAuthorizations(c *call) []authzRequest {
	f := c.form
	base := s.baseContext(c)
	st := s.iamState()
	action := "iam:" + c.action
	roleARN := func(name, path string) (string, map[string]string) {
		if r := st.roles[strings.ToLower(name)]; r != nil {
			return s.roleARNOf(r), r.tags
		}
		return "arn:aws:iam::" + s.opts.AccountID + ":role" + path + name, nil
	}
	profileARN := func(name, path string) (string, map[string]string) {
		if p := st.profiles[strings.ToLower(name)]; p != nil {
			return s.profileARNOf(p), p.tags
		}
		return "arn:aws:iam::" + s.opts.AccountID + ":instance-profile" + path + name, nil
	}
	path := "/"
	if f.has("Path") {
		path = f.str("Path")
	}
	var requested map[string]string
	if tags, e := iamTags(f); e == nil && len(tags) > 0 {
		requested = tags
	}
	req := func(action, arn string, tags map[string]string) authzRequest {
		ctx := base
		ctx.tags, ctx.requestTags = tags, requested
		return authzRequest{action: action, resource: arn, ctx: ctx}
	}
	var reqs []authzRequest
	switch c.action {
	case "CreateInstanceProfile", "GetInstanceProfile", "RemoveRoleFromInstanceProfile", "DeleteInstanceProfile", "AddRoleToInstanceProfile":
		arn, tags := profileARN(f.str("InstanceProfileName"), path)
		reqs = append(reqs, req(action, arn, tags))
		if c.action == "CreateInstanceProfile" && requested != nil {
			reqs = append(reqs, req("iam:TagInstanceProfile", arn, tags))
		}
		if c.action == "AddRoleToInstanceProfile" {
			// "The caller of this operation must be granted the PassRole permission on the IAM role".
			arn, tags := roleARN(f.str("RoleName"), "/")
			reqs = append(reqs, req("iam:PassRole", arn, tags))
		}
	default:
		arn, tags := roleARN(f.str("RoleName"), path)
		reqs = append(reqs, req(action, arn, tags))
		if c.action == "CreateRole" && requested != nil {
			reqs = append(reqs, req("iam:TagRole", arn, tags))
		}
	}
	return reqs
}

// passedRole is the ARN of the role a launch with the instance profile profile (a name or an ARN, as given)
// passes (R54, R62): the role the profile holds when it was made through the API; otherwise the role of the
// profile's own name, as the console makes them. The caller holds s.mu.
func (s *Server) passedRole(profile string) string {
	name := profile[strings.LastIndex(profile, "/")+1:]
	if p := s.iamState().profiles[strings.ToLower(name)]; p != nil && len(p.roles) > 0 {
		if r := s.iamState().roles[strings.ToLower(p.roles[0])]; r != nil {
			return s.roleARNOf(r)
		}
	}
	return s.RoleARN(name)
}

// apiRole is the role made through the API whose ARN is arn, or nil. The caller holds s.mu.
func (s *Server) apiRole(arn string) *iamRole {
	for _, r := range s.iamState().roles {
		if s.roleARNOf(r) == arn {
			return r
		}
	}
	return nil
}

// apiRolePolicies are the inline policies of the role made through the API whose ARN is arn: a role session's
// policies (R62). A role without any allows nothing. ok is false for a role not made through the API. The
// caller holds s.mu.
func (s *Server) apiRolePolicies(arn string) (docs []policyDocument, ok bool) {
	r := s.apiRole(arn)
	if r == nil {
		return nil, false
	}
	for _, n := range sortedKeys(r.parsed) {
		docs = append(docs, r.parsed[n])
	}
	return docs, true
}

// InstanceCredentials are the credentials IMDS serves the instance id of region: a session of the role its
// instance profile holds, as InstanceProfileCredentials opens one, for lifetime on the fake's clock (R62). The
// instance's profile must be one made through IAM's API, holding a role whose trust policy lets
// ec2.amazonaws.com assume it: otherwise EC2 gives the instance no credentials, and the test fails.
func (s *Server) InstanceCredentials(region, instanceID string, lifetime time.Duration) (accessKeyID, secretAccessKey, sessionToken string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.mustRegion(region).instances[instanceID]
	if in == nil {
		s.t.Fatalf("ec2fake: no instance %s in %s", instanceID, region)
		return "", "", ""
	}
	profile := in.IAMInstanceProfile
	name := profile[strings.LastIndex(profile, "/")+1:]
	p := s.iamState().profiles[strings.ToLower(name)]
	if p == nil || len(p.roles) == 0 {
		s.t.Fatalf("ec2fake: instance %s's profile %q is no instance profile made through IAM's API holding a role: it gets no credentials", instanceID, profile)
		return "", "", ""
	}
	r := s.iamState().roles[strings.ToLower(p.roles[0])]
	if t, e := parseTrust(r.trust); e != nil || !t.trusts("ec2.amazonaws.com") {
		s.t.Fatalf("ec2fake: the trust policy of role %s does not let ec2.amazonaws.com assume it: instance %s gets no credentials", r.name, instanceID)
		return "", "", ""
	}
	pr := s.openSessionARN(s.roleARNOf(r), r.name, instanceID, "", lifetime)
	pr.session.InstanceID = instanceID
	return pr.session.AccessKeyID, pr.secret, pr.token
}
