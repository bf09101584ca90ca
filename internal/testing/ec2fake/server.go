// Package ec2fake is a stateful fake of the AWS APIs the aws backend calls, for tests: the EC2 Query API,
// the SSM JSON 1.1 API, STS GetCallerIdentity and AssumeRole, Service Quotas' GetServiceQuota, IAM's
// Query API for the roles and instance profiles the backend makes (iamapi.go), CloudWatch Logs' JSON 1.1
// API for a proxy's access log (logs.go), and Elastic Load Balancing v2's Query API for the load balancer of
// a proxy of several instances (elbv2.go), on one loopback endpoint. The real
// aws-sdk-go-v2 clients talk to it: requests are SigV4-signed and verified (with the fake's own credentials
// or a role session's temporary ones), EC2 answers are the Query API's XML, SSM's and Service Quotas' are
// JSON 1.1, errors carry
// the codes and HTTP statuses the services document, so what the backend reads is what it would parse from
// AWS.
//
// It serves exactly the actions the backend calls (ec2Actions, ssmActions, stsActions, sqActions) and refuses
// any other as the services do (EC2 and STS: InvalidAction; SSM and Service Quotas: UnknownOperationException),
// so a backend that starts
// calling something new fails loudly. A request parameter the SDK's serializer for that action cannot send
// is UnknownParameter; a parameter the fake accepts but does not model, where modelling it would change the
// answer (a launch template, a network interface), is 501 NotImplemented.
//
// The service is picked from the SigV4 credential scope, and so is the region: one server holds several
// regions, each with its own instances, groups, addresses, subnets, images and parameters, and a region can
// be made unreachable. State moves on an injectable clock and on DescribeInstances polls (Timing), never on
// the wall clock, so a test plays minutes of EC2 without waiting them.
//
// README.md lists each rule the fake enforces with its source, and says what could not be confirmed;
// rules_test.go proves each through the real SDK clients.
package ec2fake

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Defaults of Options.
const (
	DefaultAccountID       = "123456789012"
	DefaultAccessKeyID     = "AKIAEC2FAKEEXAMPLE01"
	DefaultSecretAccessKey = "ec2fake/secret/access/key/EXAMPLEKEY0001"
	DefaultMaxInstances    = 20
	DefaultMaxElasticIPs   = 5
	// DefaultMaxVCPUs and DefaultMaxSpotVCPUs are the fake's Standard-family vCPU quotas per region, On-Demand
	// (L-1216C47A) and Spot (L-34B43A08): room for sixteen 2-vCPU instances of each.
	DefaultMaxVCPUs     = 32
	DefaultMaxSpotVCPUs = 32
	// DefaultMaxStandardParameters is Parameter Store's standard-tier quota per Region (SSM API Reference:
	// PutParameter, Tier: "You can create a maximum of 10,000 standard parameters for each Region").
	DefaultMaxStandardParameters = 10000
)

// DefaultRegions are the regions a zero Options serves.
var DefaultRegions = []string{"eu-west-1", "us-east-1"}

// Options shape a Server. The zero value serves DefaultRegions with the default account, credentials and
// limits, DefaultTiming, no throttling, and the seeded network and images of each region (see seed.go).
type Options struct {
	Regions   []string
	AccountID string
	// AccessKeyID and SecretAccessKey are the only credentials the fake accepts; every request must be
	// signed with them (SigV4).
	AccessKeyID, SecretAccessKey string
	// Now, when set, is the fake's clock. Otherwise the fake keeps its own, which starts at New and moves
	// only by Advance.
	Now func() time.Time
	// Timing says when instances change state; nil takes DefaultTiming.
	Timing *Timing
	// MaxInstances is the account attribute max-instances and the On-Demand instance limit per region
	// (InstanceLimitExceeded); 0 takes DefaultMaxInstances.
	MaxInstances int
	// MaxVCPUs is the vCPU quota per region of On-Demand instances of the Standard families
	// (VcpuLimitExceeded), and the value of Service Quotas' L-1216C47A; 0 takes DefaultMaxVCPUs, a negative
	// value is a quota of none.
	MaxVCPUs int
	// MaxSpotVCPUs is the vCPU quota per region of Spot instances of the Standard families
	// (MaxSpotInstanceCountExceeded), and the value of L-34B43A08; 0 takes DefaultMaxSpotVCPUs.
	MaxSpotVCPUs int
	// MaxElasticIPs is the Elastic IP address quota per region (AddressLimitExceeded), the account
	// attributes max-elastic-ips and vpc-max-elastic-ips and Service Quotas' L-0263D0A3; 0 takes
	// DefaultMaxElasticIPs.
	MaxElasticIPs int
	// MaxStandardParameters is the standard-tier parameter quota per region; 0 takes the default.
	MaxStandardParameters int
	// MaxRulesPerGroup is the quota of inbound rules per security group (RulesPerSecurityGroupLimitExceeded)
	// and the value of Service Quotas' vpc L-0EA8095F (R49); 0 takes MaxIngressRules, the default quota.
	MaxRulesPerGroup int
	// Throttle gives actions ("RunInstances", "PutParameter", ...) a token bucket each, per region.
	Throttle map[string]Bucket
	// Images are added to every region's seeded ones.
	Images []Image
	// Roles are the IAM roles of the account that the fake's user may assume (STS AssumeRole).
	Roles []Role
	// CallerPolicies, when set, are the identity-based policies (JSON) of the fake's user, whose credentials
	// Credentials and AWSConfig give: every request they sign, on every service, is authorized by them (R51),
	// as a role's Policy authorizes its sessions'. Without them the user may do anything. AdminAWSConfig signs
	// as another user of the account, whom no policy limits.
	CallerPolicies []string
	// MaxRoles and MaxInstanceProfiles are IAM's quotas of roles and instance profiles per account
	// (LimitExceeded, R60); 0 takes DefaultMaxRoles and DefaultMaxInstanceProfiles, a negative value is a
	// quota of none.
	MaxRoles, MaxInstanceProfiles int
}

// Timing says how long instances stay in their transitional states. A state ends once both hold: its
// instance has been in it for at least the duration on the fake's clock, and at least that many
// DescribeInstances calls were made in its region since it entered it. Zero values end a state at once.
type Timing struct {
	PendingPolls      int
	PendingFor        time.Duration
	ShuttingDownPolls int
	ShuttingDownFor   time.Duration
	// A terminated instance stays visible to DescribeInstances this long (and for this many polls), then
	// vanishes: describing it by id is InvalidInstanceID.NotFound.
	TerminatedVisiblePolls int
	TerminatedVisibleFor   time.Duration
	// UnseenPolls plays EC2's eventual consistency ("Eventual consistency in the Amazon EC2 API"): a new
	// instance is unknown (InvalidInstanceID.NotFound) to this many calls of DescribeInstances, CreateTags,
	// TerminateInstances and AssociateAddress naming it, while RunInstances has already answered its id.
	UnseenPolls int
	// UnseenGroupCalls plays the same for a new security group (R46): it is unknown (InvalidGroup.NotFound)
	// to this many calls naming it by id (AuthorizeSecurityGroupIngress, RevokeSecurityGroupIngress, their
	// Egress twins, DescribeSecurityGroups, DeleteSecurityGroup, CreateTags, RunInstances' SecurityGroupId), though
	// CreateSecurityGroup answered its id.
	UnseenGroupCalls int
	// UnseenAddressCalls plays it for a new Elastic IP (R47): it is unknown (InvalidAllocationID.NotFound) to
	// this many calls naming its allocation id, though AllocateAddress answered it.
	UnseenAddressCalls int
	// UnseenProfileLaunches plays it for an instance profile IAM's CreateInstanceProfile made (R62, with R48's
	// answer): that many RunInstances naming it are refused as naming an invalid profile.
	UnseenProfileLaunches int
	// DrainingPolls is how many DescribeTargetHealth calls a target deregistered from a group a load balancer
	// forwards to is listed draining (Target.DeregistrationInProgress) before it leaves the group: the
	// deregistration delay, 300 seconds by default (R72).
	DrainingPolls int
	// RootVolumePolls is how many DescribeReplaceRootVolumeTasks calls a root volume replacement task stays
	// pending, and then in progress (the instance rebooting onto its new root volume), before it succeeds (R77).
	RootVolumePolls int
}

// DefaultTiming shows each transitional state to exactly one DescribeInstances, and keeps terminated
// instances visible for an hour (EC2 API Reference, DescribeInstances: "Recently terminated instances might
// appear in the returned results. This interval is usually less than one hour.").
func DefaultTiming() Timing {
	return Timing{PendingPolls: 1, ShuttingDownPolls: 1, TerminatedVisibleFor: time.Hour, DrainingPolls: 2, RootVolumePolls: 1}
}

// Request is one request the fake received.
type Request struct {
	Service string // ec2, ssm, sts, servicequotas, iam, logs or elasticloadbalancing
	Region  string
	Action  string
	Status  int
	// Code is the error code answered, "" on success.
	Code string
	// AccessKey is the access key the request was signed with: the fake's own, or a role session's
	// (Sessions); "" when it was not signed.
	AccessKey string
	Time      time.Time
}

// Server is the fake. All exported methods are safe for concurrent use with requests in flight.
type Server struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	opts      Options
	timing    Timing
	regions   map[string]*region
	clockBase time.Time
	advanced  time.Duration
	log       []Request
	throttled map[string]int
	buckets   map[string]*bucketState // region/action
	faults    []*Fault
	stickNext int
	seq       uint64
	// principals are the credentials the fake accepts, by access key: its user's, and each role session's.
	principals map[string]*principal
	sessions   []Session
	// denied are the IAM actions no caller of the account may call (Deny).
	denied map[string]bool
	// rolePolicies are the parsed Policy of each role that has one, by role ARN (R45, R51).
	rolePolicies map[string][]policyDocument
	// iam is the account's IAM, as its API made it (iamapi.go): global, not a region's.
	iam *iamState
	// newProfiles are instance profiles IAM made moments ago, by name or ARN as launches give them, with
	// how many more launches do not see them yet (NewInstanceProfile, R48).
	newProfiles map[string]int
}

// NewInstanceProfile plays an instance profile IAM has just made (R48): the next unseen RunInstances that
// name it (by name or by ARN, as given here) are refused as EC2 refuses a profile IAM's change has not
// reached yet, 400 InvalidParameterValue, "Value (x) for parameter iamInstanceProfile.name is invalid.
// Invalid IAM Instance Profile name" (".arn", "ARN" for an ARN). Profiles are otherwise never checked.
func (s *Server) NewInstanceProfile(nameOrARN string, unseen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.newProfiles == nil {
		s.newProfiles = map[string]int{}
	}
	s.newProfiles[nameOrARN] = unseen
}

// profileSeen refuses a launch naming a profile NewInstanceProfile still hides. The caller holds s.mu.
func (s *Server) profileSeen(f form) *apiError {
	field, words, profile := "name", "name", f.str("IamInstanceProfile.Name")
	if arn := f.str("IamInstanceProfile.Arn"); arn != "" {
		field, words, profile = "arn", "ARN", arn
	}
	if s.newProfiles[profile] <= 0 {
		return nil
	}
	s.newProfiles[profile]--
	return ec2Err("InvalidParameterValue", "Value (%s) for parameter iamInstanceProfile.%s is invalid. Invalid IAM Instance Profile %s", profile, field, words)
}

// New starts a fake on a loopback port and closes it when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if len(opts.Regions) == 0 {
		opts.Regions = DefaultRegions
	}
	if opts.AccountID == "" {
		opts.AccountID = DefaultAccountID
	}
	if opts.AccessKeyID == "" {
		opts.AccessKeyID = DefaultAccessKeyID
	}
	if opts.SecretAccessKey == "" {
		opts.SecretAccessKey = DefaultSecretAccessKey
	}
	if opts.MaxInstances == 0 {
		opts.MaxInstances = DefaultMaxInstances
	}
	if opts.MaxElasticIPs == 0 {
		opts.MaxElasticIPs = DefaultMaxElasticIPs
	}
	if opts.MaxVCPUs == 0 {
		opts.MaxVCPUs = DefaultMaxVCPUs
	}
	if opts.MaxSpotVCPUs == 0 {
		opts.MaxSpotVCPUs = DefaultMaxSpotVCPUs
	}
	if opts.MaxRulesPerGroup == 0 {
		opts.MaxRulesPerGroup = MaxIngressRules
	}
	if opts.MaxStandardParameters == 0 {
		opts.MaxStandardParameters = DefaultMaxStandardParameters
	}
	s := &Server{
		t: t, opts: opts, timing: DefaultTiming(), regions: map[string]*region{},
		clockBase: time.Now().UTC().Truncate(time.Second), throttled: map[string]int{}, buckets: map[string]*bucketState{},
	}
	s.principals = map[string]*principal{opts.AccessKeyID: {secret: opts.SecretAccessKey, arn: s.CallerARN(), userID: fakeUserID}}
	s.loadPolicies()
	if opts.Timing != nil {
		s.timing = *opts.Timing
	}
	for i, name := range opts.Regions {
		s.regions[name] = s.seedRegion(name, i)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the endpoint of all four services: give it to each client as its BaseEndpoint.
func (s *Server) URL() string { return s.srv.URL }

// AccountID is the account every answer names.
func (s *Server) AccountID() string { return s.opts.AccountID }

// Credentials are the static credentials the fake accepts.
func (s *Server) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(s.opts.AccessKeyID, s.opts.SecretAccessKey, "")
}

// AWSConfig is an SDK configuration for region that reaches the fake: its endpoint, its credentials, and
// a retryer that retries as the SDK's standard one does but without waiting (no backoff, no client-side
// retry quota), so that retries of injected faults cost no wall time; and the server's client with request
// bodies read through Read only (readOnlyBodies).
func (s *Server) AWSConfig(region string) aws.Config {
	return aws.Config{
		Region:       region,
		Credentials:  s.Credentials(),
		BaseEndpoint: aws.String(s.URL()),
		HTTPClient:   &http.Client{Transport: readOnlyBodies{base: s.srv.Client().Transport}},
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
				o.RateLimiter = ratelimit.None
			})
		},
	}
}

// now is the fake's clock. The caller holds s.mu.
func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now().UTC()
	}
	return s.clockBase.Add(s.advanced)
}

// Now is the fake's clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// Advance moves the fake's own clock; a test that injected Options.Now moves its clock itself.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Now != nil {
		s.t.Fatalf("ec2fake: Advance with an injected clock (Options.Now): move that clock instead")
	}
	s.advanced += d
}

// Settle ends every transitional state at once, as if enough time and polls had passed: pending instances
// run (unless held by StickInPending), shutting-down ones are terminated. Terminated ones stay visible.
func (s *Server) Settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rg := range s.regions {
		for _, in := range rg.instances {
			for in.State == StatePending && !in.stuck || in.State == StateShuttingDown {
				s.transition(rg, in)
			}
		}
	}
}

// SetReachable makes a region answer (true) or drop every connection unanswered (false), as an endpoint
// that cannot be reached.
func (s *Server) SetReachable(region string, reachable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rg := s.regions[region]; rg != nil {
		rg.unreachable = !reachable
	}
}

// Requests returns a copy of the request log.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Count is how many requests named action (EC2, SSM, STS or Service Quotas), answered or not.
func (s *Server) Count(action string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Action == action {
			n++
		}
	}
	return n
}

// Counts is the number of requests of each action.
func (s *Server) Counts() map[string]int {
	out := map[string]int{}
	for _, r := range s.Requests() {
		out[r.Action]++
	}
	return out
}

// Throttled is how many requests of action were refused by its token bucket.
func (s *Server) Throttled(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.throttled[action]
}

// nextID makes a resource id: prefix, '-', 17 hex digits, unique within the server.
func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s-%017x", prefix, 0x0ec2fa4e0000000+s.seq)
}

// region holds one region's state.
type region struct {
	name        string
	unreachable bool
	// describes counts DescribeInstances calls, the polls that move instances along (Timing).
	describes    int
	instances    map[string]*instance
	reservations map[string][]string // reservation id -> instance ids, in launch order
	launches     map[string]*launch  // client token -> the launch it made
	volumes      map[string]*Volume
	vpcs         map[string]*VPC
	subnets      map[string]*Subnet
	groups       map[string]*group
	addresses    map[string]*Address
	associations map[string]string // association id -> allocation id, ended ones too (idempotent disassociate)
	images       map[string]Image
	params       map[string]*parameter
	logGroups    map[string]*logGroup // CloudWatch Logs' groups by name (logs.go)
	guests       map[string]GuestMode // proxy name -> how its agent behaves (SetGuest); GuestApplies when absent
	elbState     *elbState            // Elastic Load Balancing v2 (elbv2.go), made on first use
	unhealthy    map[string]bool      // instance ids whose load balancer health checks fail (SetTargetHealth)
	rootTasks    map[string]*rootTask // root volume replacement tasks by id (rootvolumes.go)
	rootTokens   map[string]string    // client token -> the task it made
	nextIP       int
}

func (s *Server) regionOf(name string) (*region, bool) {
	rg, ok := s.regions[name]
	return rg, ok
}

// RegionNames lists the regions the fake serves, sorted.
func (s *Server) RegionNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.regions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// mustRegion returns a region's state for an accessor, failing the test when the fake does not serve it.
func (s *Server) mustRegion(name string) *region {
	rg, ok := s.regions[name]
	if !ok {
		s.t.Fatalf("ec2fake: region %q is not served (Options.Regions: %s)", name, strings.Join(s.opts.Regions, ", "))
	}
	return rg
}
