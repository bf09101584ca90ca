// Package gcp runs egress proxies as Compute Engine VMs, through the REST client of
// cloud.google.com/go/compute/apiv1. A VM carries the provider's labels and, in its metadata, the rendered Squid
// config and a startup script that applies it at boot and whenever the metadata changes, so rule changes never
// replace the VM. Clients are built per project on first use.
//
// A proxy is the VM; with static_egress_ip, a regional address named <name>-ip reserved for it; with a service
// account, a Secret Manager secret of its own. Its id is gcp/<project>/<zone>/<name>. What the VM runs (the startup
// script and its metadata keys) is in the guest subpackage.
//
// With Options.Instances above one, a proxy is that many VMs, <name>-1 and on, over the zones of the region, behind
// an internal passthrough Network Load Balancer of the proxy's name whose address is the proxy's (ha.go): same id
// form, no VM of the proxy's own name. Its unlabelled parts carry the proxy's identity and ownership in their
// description, and one that does not name this proxy is never adopted nor deleted (ha.go#haOwned).
//
// This comment holds the rules of this backend alone; the contract every backend keeps is in
// internal/backend/CONTRACT.md. References are file#Symbol, from this directory unless they name one;
// blueprint_test.go in internal/backend resolves them.
//
// # The contract on Compute Engine
//
//   - Create adopts a reserved address only when it carries the proxy's owner and UID
//     (address.go#Backend.reserveAddress). A create refused with Quota or Permanent releases the address it
//     reserved and deletes its secret (create.go#Backend.giveBack).
//   - Get refuses, as Permanent, a VM without the provider's labels (metadata.go#toInstance), and releases nothing.
//     The address of a VM deleted behind the provider's back is listed by ListByTag as kept
//     (list.go#Backend.listKeptAddresses), as gcp/<project>/<region>/<address>, and the GC action or a Delete of
//     that id releases it (readonly_test.go#TestGetChangesNothing). Delete tells a region from a zone by its dashes
//     (delete.go#isRegion). The Secret Manager secret of a VM that is gone is listed too, with one filtered list
//     of the owner's secrets (list.go#Backend.listOrphanSecrets; none where the API is off, and none in a zone
//     whose VMs could not be listed), as gcp/<project>/secrets/<secret id>, and a Delete of that id deletes it,
//     not while its VM exists again (secrets.go#Backend.deleteOrphanSecret;
//     orphansecrets_test.go#TestOrphanSecretsAreListedAndDeleted).
//   - DeleteForReplacement keeps the reserved address, labelled, for the successor of the name
//     (delete.go#Backend.DeleteForReplacement), and logs that it did (delete.go#Backend.releaseOwnAddress).
//   - A Compute operation that ends DONE with an error reaches the client as an error with an empty list; the cause
//     is only in the operation (errors.go#operationError, read in wait.go#Backend.wait). Read the result of every
//     long-running operation, not only the call's error.
//   - What a create refers to and finds missing (zone, network, subnetwork, image) is Permanent with advice
//     (errors.go#missingOnCreate). The error classes read Compute Engine's own status, reason and wording, never
//     the fake's (errors_test.go#TestClassifyComputeEngineBodies).
//
// # Compute Engine rules this backend follows
//
// Each is enforced by the Compute fake (internal/testing/computefake, its rule number in brackets) and proved
// against it.
//
//   - Guest attributes are off unless enable-guest-attributes is TRUE on the instance or the project, and the
//     instance's value wins (R15, R16). Every proxy VM sets it, at insert and at every setMetadata, with the
//     proxy's other keys (hardening.go#MetadataEnableGuestAttributes, metadata.go#rendered.items), so a project
//     that sets FALSE cannot silence its reports. An organization policy
//     (constraints/compute.disableGuestAttributesAccess) still can, and then the API refuses the query (R26); a
//     wait that times out names it in its advice (guestpoll.go#guestAttributesAdvice).
//   - Organization policies refuse with 412 conditionNotMet, the reason a stale fingerprint also gets (R25, R26). A
//     message naming a violated constraint is Permanent, not retried, with advice per constraint on what it stops
//     and what to do (errors.go#orgPolicyAdvice, errors.go#orgPolicyAdvices; an operation's CONDITION_NOT_MET in
//     errors.go#operationError). Every proxy VM has an external address, which
//     constraints/compute.vmExternalIpAccess may forbid; TestOrganizationPolicies proves both on the fake.
//   - Guest attributes may be queried at most 10 times a minute per VM, 3 a second (R19). The backend rations its
//     queries per VM to 8 a minute and 2 a second across all its calls, spaced from 2 s up to one every 10 s
//     (guestpoll.go#guestRation, guestpoll.go#Backend.waitApplied). TestGuestQueriesWithinDocumentedRate plays
//     minutes of polls on a virtual clock, and bench_test.go#BenchmarkGuestAttributeQueries reports the queries a
//     minute of a create and of a rule change.
//   - Metadata: each value at most 256 KiB, all of it less than 512 KB (R10, R11). The rules are written twice
//     (squid.conf and the stored spec) and the TLS chain once; the largest settings the schema admits make about
//     325 KB (TestLargestSettingsFitMetadata). The provider checks the rendered size at plan time
//     (internal/provider/proxy_resource_gcp.go#gcpMetadataFits, through metadatalimits.go#CheckMetadata), and
//     Create and Reconfigure check it again before they send anything (metadatalimits.go#checkMetadataItems).
//   - A health check or an instance group a backend service uses, and a backend service a forwarding rule uses,
//     cannot be deleted (R36, R37): a proxy of several VMs is made VMs first, load balancer after
//     (ha.go#Backend.createHA), and deleted forwarding rule, backend service, health check, groups, VMs last
//     (ha_ops.go#Backend.deleteHA), so while any part is left a VM or the forwarding rule is too and ListByTag
//     finds it (list.go#Backend.listHA; ha_test.go#TestHALeftoversAtEveryStep). Its members' health is the
//     backend service's getHealth (R38; ha_get.go#Backend.memberHealth), and a rule change reaches one member at a
//     time, each confirmed by its guest (ha_ops.go#Backend.reconfigureHA). A member whose VM no longer exists
//     (deleted behind Terraform's back) is Gone, one stopped or failing its health check only unhealthy; Update
//     makes a gone VM again under its name in its zone and group, touching nothing else
//     (ha_ops.go#Backend.restoreGone; ha_gone_test.go#TestHAUpdateMakesAGoneMemberAgain), and adds to its group a
//     running member outside the load balancer (ha_ops.go#Backend.rejoinGroups). A change of count between two
//     above one is made in place (ha_ops.go#Backend.shrinkHA, ha_ops.go#Backend.growHA), and so is a new image,
//     rolled one VM at a time after a surge VM of the new image serves (ha_ops.go#Backend.rollImage).
//   - setMetadata and setLabels carry the fingerprint read just before (R12, R14); a 412 conditionNotMet is
//     Transient, so the read and the write are retried together (reconfigure.go#Backend.Reconfigure,
//     backend.go#Backend.Update).
//   - Secrets out of metadata: a VM with a service account (and the cloud-platform scope, the default with one)
//     reads its htpasswd hash and TLS key from a Secret Manager secret of its own, which the provider makes before
//     the VM, grants to the VM's account alone, versions with the rules and deletes with the proxy
//     (secrets.go#usesSecretManager, secrets.go#Backend.putSecret, secrets.go#Backend.grantVM,
//     secrets.go#Backend.deleteSecret); the startup script reads it with the VM's metadata-server token. A VM
//     without one keeps them in metadata, the documented fallback. The Secret Manager fake
//     (internal/testing/secretmanagerfake) enforces that API's documented rules, each with its source;
//     secrets_test.go#TestReadableInstanceHoldsNoSecret reads the secret as the VM's account and as another
//     proxy's, and guest_test.go#TestGuestStartupScriptOnRealSquid as the real script does, over TLS.
//   - Least privilege: every API method the backend calls maps to the IAM permissions it needs
//     (permissions.go#methodPermissions), and the custom role users are given lists exactly those
//     (permissions.go#RoleFile; permissions_test.go#TestRoleFileListsWhatTheBackendNeeds). The fakes grant the
//     caller only what they are given and enforce one permission per method, with what an insert's body adds
//     (R29 to R32, S13); every test of this package and the provider's gcp acceptance tests run with the role
//     file, and permissions_test.go#TestDocumentedRoleIsExactlyEnough removes each permission in turn. A refusal
//     naming a permission is Permanent, its advice naming the role file (permissions.go#permissionAdvice);
//     Check asks Resource Manager's testIamPermissions first and is Degraded, naming what is missing
//     (permissions.go#Backend.permissionHealth).
//
// # A fake more lenient than the service
//
// The first Compute fake accepted every guest write, so nothing showed that Compute Engine turns guest attributes
// off unless enable-guest-attributes is TRUE: every wait_for_proxy and in-place change would have waited out its
// timeout on a real project. The fake now enforces the service's documented rules, each with its source, says which
// it could not confirm (its README.md), and checks every request against the discovery document the client was
// generated from.
package gcp
