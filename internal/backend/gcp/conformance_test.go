package gcp

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
)

// conformanceZone is where the suite's proxies run; projectDown is a second project that answers until
// FailScope makes its lists forbidden.
const (
	conformanceZone = "us-central1-a"
	projectDown     = "egress-down"
)

// TestConformance runs the contract's suite against the Compute fake, through the real REST client.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		New:    newConformanceWorld,
		IDForm: IDForm,
		Spec: func(name string) backend.Spec {
			spec := testSpec("unset", conformanceZone)
			spec.Name, spec.Proxy.Users = name, nil
			return spec
		},
	})
}

// TestConformanceHA runs the same suite against proxies of three VMs behind a load balancer (ha.go): every
// rule of the contract holds for them too.
func TestConformanceHA(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		New:    newConformanceWorld,
		IDForm: IDForm,
		Spec: func(name string) backend.Spec {
			spec := testSpec("unset", conformanceZone)
			spec.Name, spec.Proxy.Users = name, nil
			optionsOf(spec.Placement).Instances = 3
			return spec
		},
	})
}

func newConformanceWorld(t *testing.T) backendtest.World {
	// The guest answers every metadata change of the VM the operation changed, as Reconfigure waits for it to.
	var (
		fake    *computefake.Server
		guestMu sync.Mutex
	)
	fake = computefake.New(computefake.Options{Permissions: documentedPermissions(t), OnOperationDone: func(opType, target string) {
		project, zone, name, ok := instanceOfLink(target)
		if !ok {
			return
		}
		guestMu.Lock() // the metadata server plays one VM at a time
		defer guestMu.Unlock()
		fake.MetadataInstance(project, zone, name)
		guest{url: fake.URL}.onDone(opType, target)
	}})
	t.Cleanup(fake.Close)
	// ListByTag lists the owner's secrets too (orphans of gone VMs), on Secret Manager, which takes the
	// provider's token; the Compute fake checks none.
	secrets := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "conformance-token", AdminPermissions: documentedPermissions(t)})
	t.Cleanup(secrets.Close)
	b, err := New(Config{
		DefaultProject: testProject,
		Projects:       map[string]ProjectConfig{projectDown: {}},
		ProjectConfig: ProjectConfig{ComputeEndpoint: fake.URL, ResourceManagerEndpoint: fake.URL,
			SecretManagerEndpoint: secrets.URL, AccessToken: "conformance-token"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInitial, b.pollMax = time.Millisecond, 50*time.Millisecond
	b.guestPollInitial, b.guestPollMax = time.Millisecond, 50*time.Millisecond
	b.retry = backend.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond, Factor: 2}
	t.Cleanup(func() { _ = b.Close() })
	// fired checks at the end of the subtest that the fault it armed fired: a rule checked without its fault
	// would pass for nothing.
	fired := func(t *testing.T) {
		t.Cleanup(func() {
			if fake.Fired() == 0 {
				t.Error("the fault never fired")
			}
		})
	}
	return backendtest.World{
		Backend: b,
		// The insert is made and its answer lost: a 503 after the fact.
		LoseNextAnswer: func(t *testing.T) {
			fake.AddFault(computefake.Fault{Method: http.MethodPost, PathRE: regexp.MustCompile(`/instances$`), After: true, Times: 1, Status: 503})
			fired(t)
		},
		FailScope: func(t *testing.T) {
			fake.AddFault(computefake.Fault{Method: http.MethodGet, PathRE: regexp.MustCompile(`/projects/` + projectDown + `/aggregated/`),
				Status: http.StatusForbidden, Reason: "forbidden"})
			fired(t)
		},
		// A VM made by hand, through the same API, without the provider's labels.
		Foreign: func(t *testing.T, name string) {
			p, err := b.clients(t.Context(), testProject)
			if err != nil {
				t.Fatal(err)
			}
			op, err := p.instances.Insert(t.Context(), &computepb.InsertInstanceRequest{Project: testProject, Zone: conformanceZone, InstanceResource: &computepb.Instance{
				Name:              proto.String(name),
				MachineType:       proto.String(machineTypeLink(conformanceZone, DefaultMachineType)),
				Disks:             []*computepb.AttachedDisk{{Boot: proto.Bool(true), InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(DefaultImage)}}},
				NetworkInterfaces: []*computepb.NetworkInterface{{}},
			}})
			if err == nil {
				err = op.Wait(t.Context())
			}
			if err != nil {
				t.Fatalf("making a foreign VM: %v", err)
			}
		},
		RemoveForeign: func(t *testing.T, name string) {
			p, err := b.clients(t.Context(), testProject)
			if err != nil {
				t.Fatal(err)
			}
			op, err := p.instances.Delete(t.Context(), &computepb.DeleteInstanceRequest{Project: testProject, Zone: conformanceZone, Instance: name})
			if err == nil {
				err = op.Wait(t.Context())
			}
			if err != nil {
				t.Fatalf("deleting the foreign VM: %v", err)
			}
		},
		// The insert operation runs for longer than any test: the VM stays PROVISIONING.
		NeverReady: func(*testing.T) { fake.SetOperationLatency(time.Hour) },
	}
}

// instanceOfLink reads project, zone and name from an instance's URL (.../projects/P/zones/Z/instances/N).
func instanceOfLink(link string) (project, zone, name string, ok bool) {
	parts := strings.Split(link, "/")
	for i := 0; i+5 < len(parts); i++ {
		if parts[i] == "projects" && parts[i+2] == "zones" && parts[i+4] == "instances" {
			return parts[i+1], parts[i+3], parts[i+5], true
		}
	}
	return "", "", "", false
}
