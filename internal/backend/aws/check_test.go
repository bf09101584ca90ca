package aws

import (
	"context"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// launched is an instance a check test puts in testRegion beside the proxies: its type, Spot or not, and
// whether it is terminated before the check.
type launched struct {
	instanceType string
	spot         bool
	terminated   bool
}

// seedRegion launches instances and allocates addresses Elastic IPs in testRegion straight through EC2, as
// other software of the account would, and settles them.
func seedRegion(t *testing.T, fake *ec2fake.Server, instances []launched, addresses int) {
	t.Helper()
	ctx := t.Context()
	client := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion))
	for _, l := range instances {
		arch := "amd64"
		if archOfType(l.instanceType) == "arm64" {
			arch = "arm64"
		}
		in := &ec2.RunInstancesInput{ImageId: awssdk.String(ec2fake.DebianAMI(0, arch)), InstanceType: ec2types.InstanceType(l.instanceType),
			MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1)}
		if l.spot {
			in.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{MarketType: ec2types.MarketTypeSpot}
		}
		out, err := client.RunInstances(ctx, in)
		if err != nil {
			t.Fatalf("launching %+v: %v", l, err)
		}
		if l.terminated {
			if _, err := client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{awssdk.ToString(out.Instances[0].InstanceId)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range addresses {
		if _, err := client.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc}); err != nil {
			t.Fatal(err)
		}
	}
	fake.Settle()
}

// archOfType is the architecture of the instance types these tests launch.
func archOfType(instanceType string) string {
	if strings.HasPrefix(instanceType, "t4g.") || strings.HasPrefix(instanceType, "m7g.") {
		return "arm64"
	}
	return "amd64"
}

// Check reads the region's vCPU and Elastic IP quotas from Service Quotas and what is in use from EC2, and is
// Degraded when a proxy of the default type, or its Elastic IP, would not fit; a caller without
// servicequotas:GetServiceQuota gets the legacy account attributes, said so, and still a check.
func TestCheckReportsQuotaHeadroom(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		opts      ec2fake.Options
		deny      bool
		fault     string // the error every GetServiceQuota answers
		instances []launched
		addresses int
		reason    string
		details   map[string]string
		absent    []string
		message   []string
		note      string // words quota_source_note has
	}{
		"headroom": {
			instances: []launched{{instanceType: "t3.micro"}, {instanceType: "t4g.small"}, {instanceType: "t3.medium", spot: true},
				{instanceType: "g5.xlarge"}, {instanceType: "m5.xlarge", terminated: true}},
			addresses: 2,
			reason:    backend.HealthHealthy,
			details: map[string]string{"quota_source": "service_quotas", "quota_on_demand_vcpus": "32", "vcpus_in_use": "4",
				"quota_spot_vcpus": "32", "spot_vcpus_in_use": "2", "instances_in_use": "4", "quota_elastic_ips": "5", "elastic_ips_allocated": "2"},
			absent: []string{"quota_instances", "quota_source_note", backend.DetailMessage},
		},
		"room for one default instance": {
			opts: ec2fake.Options{MaxVCPUs: 4}, instances: []launched{{instanceType: "t3.micro"}},
			reason: backend.HealthHealthy, details: map[string]string{"quota_on_demand_vcpus": "4", "vcpus_in_use": "2"},
		},
		"vCPUs used up": {
			opts: ec2fake.Options{MaxVCPUs: 4}, instances: []launched{{instanceType: "t3.micro"}, {instanceType: "t3.small"}},
			reason: backend.HealthDegraded, details: map[string]string{"quota_on_demand_vcpus": "4", "vcpus_in_use": "4"},
			message: []string{"4 of 4 On-Demand Standard vCPUs in use in " + testRegion, "t3.micro"},
		},
		"Spot vCPUs do not count against On-Demand": {
			opts: ec2fake.Options{MaxVCPUs: 2}, instances: []launched{{instanceType: "t3.medium", spot: true}},
			reason: backend.HealthHealthy, details: map[string]string{"vcpus_in_use": "0", "spot_vcpus_in_use": "2"},
		},
		"Elastic IPs used up": {
			opts: ec2fake.Options{MaxElasticIPs: 1}, addresses: 1,
			reason: backend.HealthDegraded, details: map[string]string{"quota_elastic_ips": "1", "elastic_ips_allocated": "1"},
			message: []string{"1 of 1 Elastic IPs allocated in " + testRegion},
		},
		"both used up": {
			opts: ec2fake.Options{MaxVCPUs: 2, MaxElasticIPs: 1}, instances: []launched{{instanceType: "t3.micro"}}, addresses: 1,
			reason:  backend.HealthDegraded,
			message: []string{"2 of 2 On-Demand Standard vCPUs", "; 1 of 1 Elastic IPs"},
		},
		// A permission of the documented policy refused: Degraded, naming it and the document, the check
		// still made with the legacy attributes.
		"Service Quotas denied": {
			deny: true, instances: []launched{{instanceType: "t3.micro"}},
			reason: backend.HealthDegraded,
			details: map[string]string{"quota_source": "account_attributes", "quota_instances": "20", "quota_elastic_ips": "5",
				"vcpus_in_use": "2", "elastic_ips_allocated": "0", "missing_permissions": "servicequotas:GetServiceQuota"},
			absent:  []string{"quota_on_demand_vcpus", "quota_spot_vcpus"},
			message: []string{"lack servicequotas:GetServiceQuota", CallerPolicyFile},
		},
		"Service Quotas denied, Elastic IPs used up": {
			opts: ec2fake.Options{MaxElasticIPs: 1}, deny: true, addresses: 1,
			reason: backend.HealthDegraded, details: map[string]string{"quota_source": "account_attributes"},
			message: []string{"1 of 1 Elastic IPs allocated"},
		},
		// A network without a Service Quotas endpoint, or the service failing: the region is not down.
		"Service Quotas fails": {
			fault:   "NoSuchResourceException",
			reason:  backend.HealthHealthy,
			details: map[string]string{"quota_source": "account_attributes", "quota_instances": "20", "quota_elastic_ips": "5"},
			note:    "NoSuchResourceException",
			absent:  []string{"quota_on_demand_vcpus", backend.DetailMessage},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, tc.opts)
			seedRegion(t, fake, tc.instances, tc.addresses)
			if tc.deny {
				fake.Deny("servicequotas:GetServiceQuota")
			}
			if tc.fault != "" {
				fake.AddFault(ec2fake.Fault{Action: "GetServiceQuota", Code: tc.fault})
			}
			var h backend.Health
			for _, got := range b.Check(context.Background()) {
				if got.Target == testRegion {
					h = got
				}
			}
			if h.Reason != tc.reason || h.Healthy != (tc.reason == backend.HealthHealthy) {
				t.Fatalf("Check of %s = %s (healthy %t, %v), want %s", testRegion, h.Reason, h.Healthy, h.Details, tc.reason)
			}
			if tc.reason != backend.HealthError && h.Details["account"] != fake.AccountID() {
				t.Errorf("account %q, want %s", h.Details["account"], fake.AccountID())
			}
			for k, want := range tc.details {
				if h.Details[k] != want {
					t.Errorf("details[%s] = %q, want %q (%v)", k, h.Details[k], want, h.Details)
				}
			}
			for _, k := range tc.absent {
				if v, ok := h.Details[k]; ok {
					t.Errorf("details[%s] = %q, want none", k, v)
				}
			}
			for _, words := range tc.message {
				if !strings.Contains(h.Details[backend.DetailMessage], words) {
					t.Errorf("message %q, want %q in it", h.Details[backend.DetailMessage], words)
				}
			}
			if tc.deny {
				tc.note = "AccessDeniedException"
			}
			if !strings.Contains(h.Details["quota_source_note"], tc.note) {
				t.Errorf("quota_source_note %q, want %q in it", h.Details["quota_source_note"], tc.note)
			}
		})
	}
}
