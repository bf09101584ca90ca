package ec2fake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Authorization (R51): a request signed by credentials that carry identity-based policies (the fake's user
// with Options.CallerPolicies, a session of a role with Role.Policy) is allowed only when the policies allow
// every action on every resource it needs (iam_resources.go), and is answered otherwise as its service answers
// a denial: EC2 403 UnauthorizedOperation with an encoded authorization message, SSM and Service Quotas 400
// AccessDeniedException, STS 403 AccessDenied. Credentials without policies (the fake's user without
// CallerPolicies, its administrator, a role without Policy) are not limited, as before, but for what Deny
// takes from every caller.

// The fake's administrator: a second user of the account whom no policy limits, for what a test does behind
// the caller's back (objects of others, tampering) while the caller's policies are evaluated.
const (
	AdminAccessKeyID     = "AKIAEC2FAKEADMIN0001"
	adminSecretAccessKey = "ec2fake/admin/secret/access/key/EXAMPLE1"
	adminUserID          = "AIDAEC2FAKEADMIN00001"
)

// AdminARN is the administrator's identity, as GetCallerIdentity names it.
func (s *Server) AdminARN() string { return "arn:aws:iam::" + s.opts.AccountID + ":user/ec2fake-admin" }

// AdminCredentials are the administrator's static credentials.
func (s *Server) AdminCredentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(AdminAccessKeyID, adminSecretAccessKey, "")
}

// AdminAWSConfig is AWSConfig signed by the administrator, whom no policy limits.
func (s *Server) AdminAWSConfig(region string) aws.Config {
	cfg := s.AWSConfig(region)
	cfg.Credentials = s.AdminCredentials()
	return cfg
}

// loadPolicies parses the caller's and the roles' policies when the fake starts: one that does not parse, or
// uses an element the evaluator does not model, fails the test at once.
func (s *Server) loadPolicies() {
	s.principals[AdminAccessKeyID] = &principal{secret: adminSecretAccessKey, arn: s.AdminARN(), userID: adminUserID}
	user := s.principals[s.opts.AccessKeyID]
	for i, doc := range s.opts.CallerPolicies {
		d, err := parsePolicy(doc)
		if err != nil {
			s.t.Fatalf("ec2fake: Options.CallerPolicies[%d]: %v", i, err)
		}
		user.policies = append(user.policies, d)
	}
	user.evaluated = len(s.opts.CallerPolicies) > 0
	s.rolePolicies = map[string][]policyDocument{}
	for _, r := range s.opts.Roles {
		if r.Policy == "" {
			continue
		}
		d, err := parsePolicy(r.Policy)
		if err != nil {
			s.t.Fatalf("ec2fake: role %s's Policy: %v", r.Name, err)
		}
		s.rolePolicies[s.RoleARN(r.Name)] = []policyDocument{d}
	}
}

// policiesOf are the policies that bind p, and whether any are evaluated at all.
func (s *Server) policiesOf(p *principal) ([]policyDocument, bool) {
	switch {
	case p == nil:
		return nil, false
	case p.session != nil:
		if docs, ok := s.apiRolePolicies(p.session.RoleARN); ok {
			return docs, true // a role made through IAM's API: its inline policies, none allowing nothing (R62)
		}
		docs, ok := s.rolePolicies[p.session.RoleARN]
		return docs, ok
	}
	return p.policies, p.evaluated
}

// authzRequest is one action on one resource ("*" for an action without resource-level permissions) that a
// request needs allowed, with the request context it is evaluated in.
type authzRequest struct {
	action, resource string
	ctx              requestContext
}

// baseContext is what every request of c's caller brings: the principal's keys ("AWS global condition context
// keys": aws:userid, aws:PrincipalArn, aws:PrincipalAccount, aws:RequestedRegion) and, for an instance's
// role session, ec2:SourceInstanceARN ("IAM JSON policy elements: Variables and tags").
func (s *Server) baseContext(c *call) requestContext {
	p := c.principal
	keys := map[string]string{"aws:userid": p.userID, "aws:PrincipalArn": p.arn, "aws:PrincipalAccount": s.opts.AccountID, "aws:RequestedRegion": c.region}
	if p.session != nil {
		keys["aws:PrincipalArn"] = p.session.RoleARN
		if id := p.session.InstanceID; id != "" {
			keys["ec2:SourceInstanceARN"] = "arn:aws:ec2:" + c.region + ":" + s.opts.AccountID + ":instance/" + id
		}
	} else {
		keys["aws:username"] = p.arn[strings.LastIndex(p.arn, "/")+1:]
	}
	return requestContext{keys: keys}
}

// authorizeCall authorizes c by its caller's policies: nil when allowed, the service's denial otherwise. The
// caller holds s.mu.
func (s *Server) authorizeCall(c *call) *apiError {
	if _, evaluated := s.policiesOf(c.principal); !evaluated && len(s.denied) == 0 {
		return nil
	}
	rg := s.regions[c.region]
	var reqs []authzRequest
	switch c.service {
	case "ec2":
		reqs = s.ec2Authorizations(rg, c)
	case "ssm":
		reqs = s.ssmAuthorizations(rg, c)
	case "servicequotas":
		reqs = s.sqAuthorizations(c)
	case "logs":
		reqs = s.logsAuthorizations(rg, c)
	}
	return s.authorizeRequests(c, reqs)
}

// authorizeRequests checks each request in order and answers the first one denied. The caller holds s.mu.
func (s *Server) authorizeRequests(c *call, reqs []authzRequest) *apiError {
	docs, evaluated := s.policiesOf(c.principal)
	for _, r := range reqs {
		var why string
		var matched []policyStatement
		switch {
		case s.denied[r.action]:
			why = fmt.Sprintf(whyNoAllow, r.action)
		case evaluated:
			why, matched = evaluate(docs, r.action, r.resource, r.ctx)
		}
		if why != "" {
			return s.denial(c, r, why, matched)
		}
	}
	return nil
}

// denial is the service's answer to a request the caller's policies do not allow, in the words IAM's
// denials take ("User: <arn> is not authorized to perform: <action> on resource: <arn> because no
// identity-based policy allows the <action> action"): EC2's UnauthorizedOperation with the encoded
// authorization message after them ("How do I decode ... UnauthorizedOperation errors", AWS re:Post
// knowledge center: "You are not authorized to perform this operation. User: ... is not authorized to
// perform: ec2:RunInstances on resource: ... because no identity-based policy allows the ec2:RunInstances
// action. Encoded authorization failure message: ..."), STS's AccessDenied as R38 answers it.
func (s *Server) denial(c *call, r authzRequest, why string, matched []policyStatement) *apiError {
	on := ""
	if r.resource != "*" {
		on = " on resource: " + r.resource
	}
	words := fmt.Sprintf("User: %s is not authorized to perform: %s%s %s", c.principal.arn, r.action, on, why)
	switch c.service {
	case "ec2":
		return ec2Err("UnauthorizedOperation", "You are not authorized to perform this operation. %s. Encoded authorization failure message: %s",
			words, encodeAuthorizationMessage(c.principal, r, why == whyExplicitDeny, matched))
	case "sts":
		return stsErr("AccessDenied", "User: %s is not authorized to perform: %s%s", c.principal.arn, r.action, on)
	case "servicequotas":
		return sqErr("AccessDeniedException", "%s", words)
	case "iam":
		return iamErr("AccessDenied", "%s", words)
	case "elasticloadbalancing":
		return elbErr("AccessDenied", "%s", words)
	}
	return ssmErr("AccessDeniedException", "%s", words)
}

// authorizationMessage is the decoded form of an encoded authorization message ("STS API Reference:
// DecodeAuthorizationMessage": whether the request was denied by an explicit deny or by no allow, the
// principal, the action, the resource, and the values of the condition keys of the request), in the shape
// DecodeAuthorizationMessage answers as public examples show it.
type authorizationMessage struct {
	Allowed           bool `json:"allowed"`
	ExplicitDeny      bool `json:"explicitDeny"`
	MatchedStatements struct {
		Items []matchedStatement `json:"items"`
	} `json:"matchedStatements"`
	Failures struct {
		Items []string `json:"items"`
	} `json:"failures"`
	Context struct {
		Principal struct {
			ID  string `json:"id"`
			ARN string `json:"arn"`
		} `json:"principal"`
		Action     string `json:"action"`
		Resource   string `json:"resource"`
		Conditions struct {
			Items []conditionItem `json:"items"`
		} `json:"conditions"`
	} `json:"context"`
}

type matchedStatement struct {
	StatementID string `json:"statementId"`
	Effect      string `json:"effect"`
}

type conditionItem struct {
	Key    string `json:"key"`
	Values struct {
		Items []struct {
			Value string `json:"value"`
		} `json:"items"`
	} `json:"values"`
}

// encodeAuthorizationMessage is the message EC2 appends to an UnauthorizedOperation: opaque to the caller (the
// fake's is the decoded form in unpadded URL-safe base64; AWS's is encrypted, and only
// sts:DecodeAuthorizationMessage reads it, which the fake does not serve: DecodeAuthorizationMessage does).
func encodeAuthorizationMessage(p *principal, r authzRequest, explicitDeny bool, matched []policyStatement) string {
	var m authorizationMessage
	m.ExplicitDeny = explicitDeny
	m.Failures.Items = []string{}
	m.MatchedStatements.Items = []matchedStatement{}
	for _, st := range matched {
		m.MatchedStatements.Items = append(m.MatchedStatements.Items, matchedStatement{StatementID: st.Sid, Effect: strings.ToUpper(st.Effect)})
	}
	m.Context.Principal.ID, m.Context.Principal.ARN = p.userID, p.arn
	m.Context.Action, m.Context.Resource = r.action, r.resource
	add := func(key, value string) {
		item := conditionItem{Key: key}
		item.Values.Items = append(item.Values.Items, struct {
			Value string `json:"value"`
		}{value})
		m.Context.Conditions.Items = append(m.Context.Conditions.Items, item)
	}
	for _, k := range sortedKeys(r.ctx.keys) {
		add(k, r.ctx.keys[k])
	}
	for _, k := range sortedKeys(r.ctx.tags) {
		add("aws:ResourceTag/"+k, r.ctx.tags[k])
	}
	for _, k := range sortedKeys(r.ctx.requestTags) {
		add("aws:RequestTag/"+k, r.ctx.requestTags[k])
	}
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeAuthorizationMessage decodes the encoded authorization message of an UnauthorizedOperation the fake
// answered into the JSON DecodeAuthorizationMessage would answer.
func DecodeAuthorizationMessage(encoded string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", fmt.Errorf("not an encoded authorization message of the fake: %w", err)
	}
	var m authorizationMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("not an encoded authorization message of the fake: %w", err)
	}
	return string(b), nil
}

// Deny takes an IAM action ("servicequotas:GetServiceQuota", "ec2:RunInstances") from every caller of the
// fake's account, role sessions and the administrator included, as if no policy allowed it: the service then
// answers its denial (R42).
func (s *Server) Deny(iamAction string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if service, action, ok := strings.Cut(iamAction, ":"); !ok || service == "" || action == "" {
		s.t.Fatalf("ec2fake: Deny(%q): not an IAM action (service:Action)", iamAction)
	}
	if s.denied == nil {
		s.denied = map[string]bool{}
	}
	s.denied[iamAction] = true
}
