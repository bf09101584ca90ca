package aws

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// Config is the backend's configuration: the regions proxies may be placed in, each with how to reach it.
type Config struct {
	// DefaultRegion is where a proxy that names no region goes; it must be one of Regions.
	DefaultRegion string
	// Regions are keyed by region code (eu-west-1). A region's empty settings take the SDK's usual sources:
	// the environment, the shared config and credentials files, then the instance's or task's role.
	Regions map[string]RegionConfig
	// HTTPClient, when set, carries every request (tests); the SDK's own otherwise.
	HTTPClient *http.Client
}

// RegionConfig says how to reach one region.
type RegionConfig struct {
	Profile                string
	SharedConfigFiles      []string
	SharedCredentialsFiles []string
	// AccessKey and SecretKey (and SessionToken for temporary ones) are static credentials; both or neither.
	AccessKey, SecretKey, SessionToken string
	// AssumeRole, when its RoleARN is set, is assumed with the credentials above.
	AssumeRole AssumeRole
	// Endpoints override the services' addresses, for tests and private endpoints.
	EC2Endpoint, SSMEndpoint, STSEndpoint, ServiceQuotasEndpoint string
	// IAMEndpoint is IAM's, global: the same for every region of a partition.
	IAMEndpoint string
	// LogsEndpoint is CloudWatch Logs', for the backend's calls and, when it is HTTPS, the guest's.
	LogsEndpoint string
	// ELBEndpoint is Elastic Load Balancing's, for the load balancer of a proxy of several instances.
	ELBEndpoint string
}

// AssumeRole is a role the backend assumes before calling EC2 and SSM.
type AssumeRole struct {
	RoleARN, SessionName, ExternalID string
}

// regionRE is the shape of a region code: partition-area-number, such as eu-west-1 or us-gov-east-1.
var regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

// ValidateRegion accepts a region code.
func ValidateRegion(region string) error {
	if !regionRE.MatchString(region) {
		return fmt.Errorf("%q is not a region code such as eu-west-1", region)
	}
	return nil
}

func (c Config) validate() error {
	if len(c.Regions) == 0 {
		return fmt.Errorf("no region configured: set aws.region or aws.regions")
	}
	for name, r := range c.Regions {
		if err := ValidateRegion(name); err != nil {
			return err
		}
		if (r.AccessKey == "") != (r.SecretKey == "") {
			return fmt.Errorf("region %s: access_key and secret_key go together", name)
		}
	}
	if c.DefaultRegion != "" {
		if _, ok := c.Regions[c.DefaultRegion]; !ok {
			return fmt.Errorf("the default region %s is not among the configured ones", c.DefaultRegion)
		}
	}
	return nil
}

// RegionNames lists the configured regions, sorted.
func (c Config) RegionNames() []string {
	names := make([]string, 0, len(c.Regions))
	for n := range c.Regions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sdkConfig builds the SDK's configuration for one region. It reads files and the environment but calls
// nothing: credentials are fetched on the first request.
func (c Config) sdkConfig(ctx context.Context, region string, r RegionConfig) (awssdk.Config, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(region)}
	if r.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(r.Profile))
	}
	if len(r.SharedConfigFiles) > 0 {
		opts = append(opts, config.WithSharedConfigFiles(r.SharedConfigFiles))
	}
	if len(r.SharedCredentialsFiles) > 0 {
		opts = append(opts, config.WithSharedCredentialsFiles(r.SharedCredentialsFiles))
	}
	if r.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(r.AccessKey, r.SecretKey, r.SessionToken)))
	}
	if c.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(c.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, err
	}
	// Wrapped once loaded: loading gives a custom CA bundle (AWS_CA_BUNDLE) to the SDK's own client, which
	// must then still be the SDK's type. Without a bundle or a client of ours, loading leaves the client nil
	// (each service would build its default): the wrapper then wraps that default, never a nil client.
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = awshttp.NewBuildableClient()
	}
	cfg.HTTPClient = readOnlyBodies{base: cfg.HTTPClient}
	if r.AssumeRole.RoleARN != "" {
		stsClient := sts.NewFromConfig(cfg, func(o *sts.Options) {
			if r.STSEndpoint != "" {
				o.BaseEndpoint = awssdk.String(r.STSEndpoint)
			}
		})
		cfg.Credentials = awssdk.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsClient, r.AssumeRole.RoleARN, func(o *stscreds.AssumeRoleOptions) {
			if r.AssumeRole.SessionName != "" {
				o.RoleSessionName = r.AssumeRole.SessionName
			}
			if r.AssumeRole.ExternalID != "" {
				o.ExternalID = awssdk.String(r.AssumeRole.ExternalID)
			}
		}))
	}
	return cfg, nil
}
