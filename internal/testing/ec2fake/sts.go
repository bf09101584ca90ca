package ec2fake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// STS's Query API ("AWS Security Token Service API Reference"): a form POST with Version 2011-06-15,
// answered with <ActionResponse><ActionResult>...</ActionResult><ResponseMetadata/></ActionResponse>; errors
// are <ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>.

const (
	stsVersion   = "2011-06-15"
	stsNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"
)

type stsHandler func(s *Server, rg *region, c *call) (any, *apiError)

// stsActions are the actions the fake serves; any other is InvalidAction.
var stsActions = map[string]stsHandler{
	"GetCallerIdentity": (*Server).getCallerIdentity,
	"AssumeRole":        (*Server).assumeRole,
}

// fakeUserID is the unique id of the fake's user, as GetCallerIdentity names it.
const fakeUserID = "AIDAEC2FAKEEXAMPLE001"

// CallerARN is the identity GetCallerIdentity names for the fake's own credentials.
func (s *Server) CallerARN() string { return "arn:aws:iam::" + s.opts.AccountID + ":user/ec2fake" }

// Role is an IAM role of the fake's account. Any credentials of the account may assume it: its trust
// policy trusts the account and the caller may call sts:AssumeRole on it, the usual setup of a deployment
// role (STS API Reference: AssumeRole, "To allow a user to assume a role in the same account").
type Role struct {
	// Name is the role's name; its ARN is arn:aws:iam::<account>:role/<Name> (RoleARN).
	Name string
	// ExternalID, when set, is the external id the role's trust policy requires (the sts:ExternalId
	// condition): an AssumeRole without it, or with another, is AccessDenied.
	ExternalID string
	// MaxSessionDuration is the longest session the role grants, 1 to 12 hours; 0 is IAM's default, one hour.
	MaxSessionDuration time.Duration
	// Policy, when set, is the role's identity-based policy (JSON), which SSM evaluates for every request its
	// sessions sign (R45); without one they may do anything.
	Policy string
}

// RoleARN is the ARN of the account's role named name.
func (s *Server) RoleARN(name string) string {
	return "arn:aws:iam::" + s.opts.AccountID + ":role/" + name
}

// Session is a role session AssumeRole opened, and the temporary credentials it answered.
type Session struct {
	RoleARN, SessionName string
	// AssumedRoleARN is the session's identity, arn:aws:sts::<account>:assumed-role/<role>/<session>, as
	// GetCallerIdentity names it.
	AssumedRoleARN string
	// AccessKeyID is the session's temporary access key: Request.AccessKey of the requests it signs.
	AccessKeyID string
	// CallerAccessKey is the access key that signed the AssumeRole.
	CallerAccessKey string
	Expires         time.Time
	// InstanceID is the instance whose profile the session is of (InstanceProfileCredentials), "" for
	// AssumeRole's: the request's ec2:SourceInstanceARN (R45).
	InstanceID string
}

// Sessions lists the role sessions AssumeRole opened, in order.
func (s *Server) Sessions() []Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Session(nil), s.sessions...)
}

type callerIdentityXML struct {
	Arn     string `xml:"Arn"`
	UserID  string `xml:"UserId"`
	Account string `xml:"Account"`
}

// getCallerIdentity names the caller (STS API Reference: GetCallerIdentity): the fake's user, or the role
// session whose temporary credentials signed the request.
func (s *Server) getCallerIdentity(_ *region, c *call) (any, *apiError) {
	return callerIdentityXML{Arn: c.principal.arn, UserID: c.principal.userID, Account: s.opts.AccountID}, nil
}

// Limits of AssumeRole's parameters (STS API Reference: AssumeRole, Request Parameters, their length and
// value constraints and patterns) and of a session (DurationSeconds: one hour by default, at most the role's
// maximum session duration, at most one hour for a session assumed with a role session's credentials).
const (
	minSessionDuration     = 900 * time.Second
	maxSessionDuration     = 43200 * time.Second
	defaultSessionDuration = time.Hour
	chainedSessionLimit    = time.Hour
)

var (
	roleSessionNameRE = regexp.MustCompile(`^[\w+=,.@-]*$`)
	externalIDRE      = regexp.MustCompile(`^[\w+=,.@:/-]*$`)
	// roleARNRE is an IAM role's ARN: account, optional path, name.
	roleARNRE = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):role/((?:[\x21-\x7e]+/)?)([\w+=,.@-]{1,64})$`)
	// assumeRoleParams are the parameters the fake models; the SDK's others (session policies, tags, MFA,
	// source identity, provided contexts, a minimum token size) change the answer and are NotImplemented.
	assumeRoleParams = []string{"Action", "Version", "RoleArn", "RoleSessionName", "DurationSeconds", "ExternalId"}
)

type assumeRoleXML struct {
	Credentials struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		SessionToken    string `xml:"SessionToken"`
		Expiration      string `xml:"Expiration"`
	} `xml:"Credentials"`
	AssumedRoleUser struct {
		Arn           string `xml:"Arn"`
		AssumedRoleID string `xml:"AssumedRoleId"`
	} `xml:"AssumedRoleUser"`
}

// assumeRole opens a role session (STS API Reference: AssumeRole) and answers its temporary credentials,
// which the fake then accepts on every service until they expire on its clock.
func (s *Server) assumeRole(_ *region, c *call) (any, *apiError) {
	f := c.form
	for name := range f.v {
		if !slices.Contains(assumeRoleParams, name) {
			return nil, stsErr("NotImplemented", "ec2fake does not model parameter %s of AssumeRole", name)
		}
	}
	var invalid []string
	constraint := func(value, member, rule string) {
		invalid = append(invalid, fmt.Sprintf("Value '%s' at '%s' failed to satisfy constraint: Member must %s", value, member, rule))
	}
	length := func(value, member string, minLen, maxLen int) {
		switch n := len(value); {
		case n < minLen:
			constraint(value, member, fmt.Sprintf("have length greater than or equal to %d", minLen))
		case n > maxLen:
			constraint(value, member, fmt.Sprintf("have length less than or equal to %d", maxLen))
		}
	}
	arn, name, externalID := f.str("RoleArn"), f.str("RoleSessionName"), f.str("ExternalId")
	length(arn, "roleArn", 20, 2048)
	length(name, "roleSessionName", 2, 64)
	if !roleSessionNameRE.MatchString(name) {
		constraint(name, "roleSessionName", `satisfy regular expression pattern: [\w+=,.@-]*`)
	}
	if f.has("ExternalId") {
		length(externalID, "externalId", 2, 1224)
		if !externalIDRE.MatchString(externalID) {
			constraint(externalID, "externalId", `satisfy regular expression pattern: [\w+=,.@:\/-]*`)
		}
	}
	duration := defaultSessionDuration
	if f.has("DurationSeconds") {
		n, err := strconv.Atoi(f.str("DurationSeconds"))
		switch d := time.Duration(n) * time.Second; {
		case err != nil:
			constraint(f.str("DurationSeconds"), "durationSeconds", "be an integer")
		case d < minSessionDuration:
			constraint(f.str("DurationSeconds"), "durationSeconds", "have value greater than or equal to 900")
		case d > maxSessionDuration:
			constraint(f.str("DurationSeconds"), "durationSeconds", "have value less than or equal to 43200")
		default:
			duration = d
		}
	}
	if len(invalid) > 0 {
		what := "1 validation error detected: "
		if len(invalid) > 1 {
			what = fmt.Sprintf("%d validation errors detected: ", len(invalid))
		}
		return nil, stsErr("ValidationError", "%s", what+strings.Join(invalid, "; "))
	}
	m := roleARNRE.FindStringSubmatch(arn)
	if m == nil {
		return nil, stsErr("ValidationError", "Request ARN is invalid")
	}
	account, path, roleName := m[1], m[2], m[3]
	// The caller's own policies first (R51): they must allow sts:AssumeRole on the role.
	if e := s.authorizeRequests(c, []authzRequest{{action: "sts:AssumeRole", resource: arn, ctx: s.baseContext(c)}}); e != nil {
		return nil, e
	}
	denied := stsErr("AccessDenied", "User: %s is not authorized to perform: sts:AssumeRole on resource: %s", c.principal.arn, arn)
	var role *Role
	for i := range s.opts.Roles {
		if s.opts.Roles[i].Name == roleName {
			role = &s.opts.Roles[i]
		}
	}
	// A role the account does not have, of another account, or whose trust policy asks for an external id
	// the caller did not give: AccessDenied alike, as STS tells no one which. An external id a role does not
	// ask for is no condition of its trust policy, and ignored.
	if account != s.opts.AccountID || path != "" || role == nil || role.ExternalID != "" && role.ExternalID != externalID {
		return nil, denied
	}
	maxDuration := role.MaxSessionDuration
	if maxDuration == 0 {
		maxDuration = defaultSessionDuration
	}
	switch {
	case c.principal.session != nil && duration > chainedSessionLimit:
		return nil, stsErr("ValidationError", "The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining.")
	case duration > maxDuration:
		return nil, stsErr("ValidationError", "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
	}
	p := s.openSession(role.Name, name, c.accessKey, duration)
	out := &assumeRoleXML{}
	session := *p.session
	out.Credentials.AccessKeyID, out.Credentials.SecretAccessKey, out.Credentials.SessionToken = session.AccessKeyID, p.secret, p.token
	out.Credentials.Expiration = session.Expires.UTC().Format(time.RFC3339)
	out.AssumedRoleUser.Arn, out.AssumedRoleUser.AssumedRoleID = session.AssumedRoleARN, p.userID
	return out, nil
}

// openSession opens a session of the account's role roleName named sessionName, lasting duration on the
// fake's clock, and registers its temporary credentials. The caller holds s.mu.
func (s *Server) openSession(roleName, sessionName, callerAccessKey string, duration time.Duration) *principal {
	return s.openSessionARN(s.RoleARN(roleName), roleName, sessionName, callerAccessKey, duration)
}

// openSessionARN is openSession of the role whose ARN is roleARN (a role made through IAM's API may have a
// path). The caller holds s.mu.
func (s *Server) openSessionARN(roleARN, roleName, sessionName, callerAccessKey string, duration time.Duration) *principal {
	s.seq++
	key := fmt.Sprintf("ASIAEC2FAKE%09d", s.seq)
	sum := sha256.Sum256([]byte(roleName))
	roleID := "AROA" + strings.ToUpper(hex.EncodeToString(sum[:]))[:17]
	session := Session{RoleARN: roleARN, SessionName: sessionName, AccessKeyID: key, CallerAccessKey: callerAccessKey,
		Expires: s.now().Add(duration), AssumedRoleARN: "arn:aws:sts::" + s.opts.AccountID + ":assumed-role/" + roleName + "/" + sessionName}
	p := &principal{secret: fmt.Sprintf("ec2fake/session/%024d", s.seq), token: fmt.Sprintf("ec2fake-session-token-%s-%x", key, sum[:8]),
		arn: session.AssumedRoleARN, userID: roleID + ":" + sessionName, expires: session.Expires, session: &session}
	s.principals[key] = p
	s.sessions = append(s.sessions, session)
	return p
}

// InstanceProfileCredentials opens a session of the role an instance's profile names, as EC2 does for the
// credentials IMDS serves at iam/security-credentials/<role> ("IAM roles for Amazon EC2": temporary
// credentials of the role, with a session token, rotated before they expire; the session is named after
// the instance). They last lifetime on the fake's clock, and every service of the fake accepts them until
// then: a guest that signs with them is checked as the backend is.
func (s *Server) InstanceProfileCredentials(roleName, instanceID string, lifetime time.Duration) (accessKeyID, secretAccessKey, sessionToken string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	arn := s.RoleARN(roleName)
	if r := s.iamState().roles[strings.ToLower(roleName)]; r != nil {
		arn = s.roleARNOf(r) // a role made through IAM's API, with its path and inline policies (R62)
	}
	p := s.openSessionARN(arn, roleName, instanceID, "", lifetime)
	p.session.InstanceID = instanceID
	return p.session.AccessKeyID, p.secret, p.token
}

func stsErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	switch code {
	case "InvalidClientTokenId", "SignatureDoesNotMatch", "MissingAuthenticationToken", "AccessDenied", "ExpiredToken":
		status = http.StatusForbidden
	case "InternalFailure":
		status = http.StatusInternalServerError
	case "NotImplemented":
		status = http.StatusNotImplemented
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// writeQueryAnswer writes an answer of the AWS Query protocol, which STS and IAM share: the action's Result
// and the ResponseMetadata inside <Action>Response, in the service's namespace.
func writeQueryAnswer(w http.ResponseWriter, namespace, action string, result any, requestID string) {
	type metaXML struct {
		RequestID string `xml:"RequestId"`
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", requestID)
	enc := xml.NewEncoder(w)
	w.WriteHeader(http.StatusOK)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: namespace}}}
	_ = enc.EncodeToken(start)
	_ = enc.EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
	_ = enc.EncodeElement(metaXML{requestID}, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}})
	_ = enc.EncodeToken(start.End())
	_ = enc.Flush()
}

// writeQueryError writes a Query protocol ErrorResponse in the service's namespace; idHeader adds the request
// id as a header too, as the fake's IAM errors carry it and its STS errors do not.
func writeQueryError(w http.ResponseWriter, namespace string, e *apiError, requestID string, idHeader bool) {
	type errorXML struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	type response struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Xmlns     string   `xml:"xmlns,attr"`
		Error     errorXML `xml:"Error"`
		RequestID string   `xml:"RequestId"`
	}
	kind := "Sender"
	if e.status >= 500 {
		kind = "Receiver"
	}
	b, _ := xml.Marshal(response{Xmlns: namespace, Error: errorXML{kind, e.code, e.message}, RequestID: requestID})
	w.Header().Set("Content-Type", "text/xml")
	if idHeader {
		w.Header().Set("X-Amzn-Requestid", requestID)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}
