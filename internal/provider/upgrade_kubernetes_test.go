package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestAccUpgrade_kubernetes: a proxy the baseline made on the test cluster (its Deployment and ReplicaSet, the
// pods, the ConfigMap, the Secret with the password's hash and the TLS key, the Service and the NetworkPolicy)
// is planned and applied by HEAD without a change, and without one write to the cluster: every object in the
// proxy's namespace keeps its uid and resourceVersion, which the API server moves on every write, whoever makes
// it, so a rollout (a new ReplicaSet, new pods), a rewritten ConfigMap or a relabelled Service all show. A pod
// is the exception: the kubelet writes its status whenever it likes (a probe's condition, a timestamp), so a
// pod keeps its uid, its metadata and spec (every field but resourceVersion and managedFields) and each
// container's restart count and id, which is what a write by the provider or a restart would move.
//
// The namespace is the test's own, so every object in it is the proxy's or the namespace's own (its
// ServiceAccount, its root CA ConfigMap, the documented Role the provider's credentials are bound by), and an
// object HEAD added anywhere in it shows as new. Events are left out: the kubelet and the controllers write
// them, never the provider.
func TestAccUpgrade_kubernetes(t *testing.T) {
	env := k8sAccPreCheck(t)
	ns := env.cluster.Namespace(t, "upgrade")
	owner := "acc-" + uuid.NewString()[:8]
	cert, key := testutil.SelfSignedPEM(t, k8sTLSName)
	config := k8sProviderBlock(t, env, owner, ns) + fmt.Sprintf(`
resource "egress_proxy" "test" {
  kubernetes = { cluster = "test", namespace = %q }
  %s
  %s
  %s
}
`, ns, upgradeRules, writeOnlyAuth("upgrade-password", 1), writeOnlyTLS(cert, key))
	var before map[string]string
	resource.Test(t, resource.TestCase{
		PreCheck:     func() { k8sAccPreCheck(t) },
		CheckDestroy: k8sCheckNothingLabelled(env, owner),
		Steps: upgradeSteps(t, config,
			func() (err error) {
				before, err = k8sUpgradeObjects(env, ns)
				if err != nil {
					return err
				}
				// What the baseline made, each kind once: the comparison below is only as good as this list.
				for _, kind := range []string{"deployments.apps", "replicasets.apps", "pods.", "configmaps.", "secrets.", "services.", "networkpolicies.networking.k8s.io"} {
					if n := k8sCountKind(before, kind); n != 1 {
						return fmt.Errorf("the baseline's proxy has %d %s in %s, want 1; the namespace holds:\n%s", n, kind, ns, strings.Join(k8sKeys(before), "\n"))
					}
				}
				return nil
			},
			func() error {
				after, err := k8sUpgradeObjects(env, ns)
				if err != nil {
					return err
				}
				if changed := changedSince(before, after); len(changed) != 0 {
					return fmt.Errorf("HEAD's plan and apply wrote to the cluster in %s:\n%s", ns, strings.Join(changed, "\n"))
				}
				return nil
			}),
	})
}

// k8sUpgradeObjects describes every object in ns but events, by "resource.group name": its uid and
// resourceVersion (for a pod, a digest of its metadata and spec instead), and for a ReplicaSet its
// pod-template-hash, for a pod each container's restart count and id, so that a failure says what moved. The
// proxy's own objects (the managed-by label) are marked as such.
func k8sUpgradeObjects(env k8sEnv, ns string) (map[string]string, error) {
	all, err := env.cluster.Readable(context.Background(), ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for key, text := range all {
		if strings.HasPrefix(key, "events.") {
			continue
		}
		var o struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Status   struct {
				ContainerStatuses []struct {
					Name         string `json:"name"`
					RestartCount int    `json:"restartCount"`
					ContainerID  string `json:"containerID"`
				} `json:"containerStatuses"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(text), &o); err != nil {
			return nil, fmt.Errorf("reading %s: %w", key, err)
		}
		// Readable gives a Secret's metadata alone, unwrapped.
		if strings.HasPrefix(key, "secrets. ") {
			if err := json.Unmarshal([]byte(text), &o.Metadata); err != nil {
				return nil, fmt.Errorf("reading %s: %w", key, err)
			}
		}
		d := fmt.Sprintf("uid %s resourceVersion %s", o.Metadata.UID, o.Metadata.ResourceVersion)
		if strings.HasPrefix(key, "pods. ") {
			digest, err := podMetadataAndSpecDigest(text)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", key, err)
			}
			d = fmt.Sprintf("uid %s metadata and spec %s", o.Metadata.UID, digest)
		}
		if o.Metadata.Labels[backend.LabelManagedBy] == backend.ManagedByValue {
			d += " (the proxy's)"
		}
		if h, ok := o.Metadata.Labels["pod-template-hash"]; ok {
			d += " pod-template-hash " + h
		}
		for _, c := range o.Status.ContainerStatuses {
			d += fmt.Sprintf(" container %s restarts %d id %s", c.Name, c.RestartCount, c.ContainerID)
		}
		out[key] = d
	}
	return out, nil
}

// podMetadataAndSpecDigest digests a pod's metadata and spec, leaving out what moves on a status write by the
// kubelet (resourceVersion, and managedFields with the time of each manager's last write).
func podMetadataAndSpecDigest(podJSON string) (string, error) {
	var pod struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
		Spec     json.RawMessage            `json:"spec"`
	}
	if err := json.Unmarshal([]byte(podJSON), &pod); err != nil {
		return "", err
	}
	delete(pod.Metadata, "resourceVersion")
	delete(pod.Metadata, "managedFields")
	// encoding/json writes map keys sorted, so equal pods give equal bytes.
	canonical, err := json.Marshal(pod)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:8]), nil
}

// k8sCountKind counts the objects of one "resource.group" in a description of k8sUpgradeObjects.
func k8sCountKind(objects map[string]string, kind string) int {
	n := 0
	for key, d := range objects {
		if strings.HasPrefix(key, kind+" ") && strings.Contains(d, "(the proxy's)") {
			n++
		}
	}
	return n
}

// k8sKeys lists a description's objects, sorted.
func k8sKeys(objects map[string]string) []string {
	var keys []string
	for k, d := range objects {
		keys = append(keys, k+": "+d)
	}
	slices.Sort(keys)
	return keys
}

// TestPodMetadataAndSpecDigest: what the kubelet writes to a pod (its status, resourceVersion, managedFields)
// leaves the digest alone; what a client writes (a label, an annotation, the spec) moves it.
func TestPodMetadataAndSpecDigest(t *testing.T) {
	const base = `{"metadata":{"name":"p","resourceVersion":"1","labels":{"a":"1"},"managedFields":[{"manager":"kubelet","time":"2026-12-05T08:00:00Z"}]},"spec":{"containers":[{"name":"squid","image":"x"}]},"status":{"phase":"Running"}}`
	tests := []struct {
		name    string
		pod     string
		changed bool
	}{
		{"the same pod", base, false},
		{"a status write by the kubelet", `{"metadata":{"name":"p","resourceVersion":"9","labels":{"a":"1"},"managedFields":[{"manager":"kubelet","time":"2026-12-05T08:00:07Z"}]},"spec":{"containers":[{"name":"squid","image":"x"}]},"status":{"phase":"Running","conditions":[{"type":"Ready"}]}}`, false},
		{"a label", `{"metadata":{"name":"p","resourceVersion":"9","labels":{"a":"2"}},"spec":{"containers":[{"name":"squid","image":"x"}]}}`, true},
		{"an annotation", `{"metadata":{"name":"p","resourceVersion":"9","labels":{"a":"1"},"annotations":{"b":"1"}},"spec":{"containers":[{"name":"squid","image":"x"}]}}`, true},
		{"the spec", `{"metadata":{"name":"p","resourceVersion":"9","labels":{"a":"1"}},"spec":{"containers":[{"name":"squid","image":"y"}]}}`, true},
	}
	want, err := podMetadataAndSpecDigest(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podMetadataAndSpecDigest(tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if (got != want) != tt.changed {
				t.Errorf("digest %s, base %s: changed = %v, want %v", got, want, got != want, tt.changed)
			}
		})
	}
}
