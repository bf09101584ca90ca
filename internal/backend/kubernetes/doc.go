// Package kubernetes runs egress proxies on Kubernetes clusters: one Deployment of Squid pods per proxy, with the
// ConfigMap holding its squid.conf, a Secret with its htpasswd when it has credentials, a Service and a
// NetworkPolicy, all labelled as the proxy's and owned by the Deployment. It talks to each configured cluster
// through client-go's typed clientset, built on the cluster's first use.
//
// A proxy's id is kubernetes/<cluster>/<namespace>/<name>. What the pods run is rendered by the guest subpackage;
// the pods run as Squid's own user under the restricted Pod Security Standard (podsecurity.go#podSecurityContext).
//
// This comment holds the rules of this backend alone; the contract every backend keeps is in
// internal/backend/CONTRACT.md. References are file#Symbol, from this directory unless they name one;
// blueprint_test.go in internal/backend resolves them.
//
// # The contract on Kubernetes
//
//   - Create adopts each object of the name only when it carries the proxy's owner and UID, and none that is being
//     deleted (create.go#adopt). When the Deployment step fails for good, it deletes the ConfigMap and Secret it
//     made, each by its UID as precondition (create.go#giveBack).
//   - Get refuses, as Permanent, a Deployment without the managed-by label (get.go#Backend.Get). CreatedAt is the
//     Deployment's creationTimestamp (get.go#instanceOf). The settings are read back from an annotation on the
//     ConfigMap, which the built-in view role can read, so it holds no password, hash or key
//     (settings_annotation.go#storedSettings).
//   - Addresses: the Service's ClusterIP is internal and its DNS name names it; a LoadBalancer's address is ingress
//     (get.go#loadBalancerAddress). The egress address is read from the nodes the pods run on: an ExternalIP, or an
//     InternalIP that is public, agreed on by every serving pod's node (egress.go#egressAddressOf,
//     egress.go#publicAddress). Each node is read once per provider process, and not at all when the credentials
//     may not get Nodes; the address is then empty (egress.go#client.nodeAddresses).
//   - Update changes the labels on every object and the replica count (update.go#Backend.Update). Reconfigure
//     writes the ConfigMap and rolls the Deployment out (reconfigure.go#Backend.Reconfigure), and returns once the
//     Service routes only to pods of the new configuration (served.go#waitServed): a Deployment says its new pods
//     are ready a moment before the Service moves onto them.
//   - Images across provider versions: Reconfigure keeps the image the pods run (an image change replaces the
//     proxy) and brings the rest of the pod template to today's form (podsecurity.go#upgradePodTemplate), so a
//     newer provider's squid.conf and start command run on an earlier release's image. What the pod takes from
//     its image is listed in internal/backend/kubernetes/guest/image.go#ImageNeeds, with the rule that keeps it
//     understood by every earlier release's image.
//   - Metrics (issue 40): with Settings.Metrics the pod runs mtail and prometheus-squid-exporter beside Squid,
//     from the same image, Squid sending each access log line to mtail over the pod's loopback as well as to
//     stdout (internal/backend/kubernetes/guest/metrics.go#renderMetrics); their named ports are on the Service, the scrape annotations on
//     the pod, and the NetworkPolicy admits those ports from the metrics ranges alone (metrics.go#metricsIngress).
//     That policy is all that keeps them to those ranges, so metrics without it are refused
//     (metrics.go#metricsNeedPolicy). Reconfigure adds, moves or removes the sidecars with a rollout
//     (metrics.go#syncMetrics).
//   - Delete scales to zero, deletes the Deployment and its ReplicaSets, and sweeps what carries the proxy's UID
//     beside it (delete.go#sweep). It returns once every pod is terminating, not gone: out of the Service, Squid's
//     listening port closed by SIGTERM, which the kubelet sees to within the pod's grace period. The pods are named
//     apart from the proxy and selected by its UID, so a replacement never meets them (delete.go#waitPodsStopping).
//     An object with a finalizer (a LoadBalancer Service) is waited for until it is gone.
//   - ListByTag makes one label-selector list of Deployments and one of Services per cluster, clusters side by
//     side; where RBAC forbids the cluster-wide list, each configured namespace is a scope of its own
//     (list.go#Backend.ListByTag).
//   - Errors: the API status first (errors.go#classOfStatus); text only for the name of the ResourceQuota that
//     refused (errors.go#quotaRE). A namespace a create names and the cluster lacks is Permanent with advice
//     (errors.go#classifyCreate). An RBAC refusal names the verb, resource, group and namespace the API server
//     refused and the Role that grants it (errors.go#rbacRefusal, errors.go#RoleDocument); a create's names every
//     verb the credentials lack in the namespace, so one failed apply names all the rules to grant
//     (check.go#explainForbidden).
//   - Permissions: exactly the Role of RoleDocument, and get on Nodes where NodesDocument is bound (without it
//     the egress address is unknown, nothing fails). Check reviews the Role's verbs (check.go#permissions); a
//     destroy that may not list or delete the ReplicaSets fails rather than leave them (delete.go#deleteReplicaSets).
package kubernetes
