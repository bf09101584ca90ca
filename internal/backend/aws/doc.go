// Package aws runs egress proxies as EC2 instances, through the AWS SDK for Go v2. A proxy is an instance with
// IMDSv2 required, a security group of its own that admits the allowed clients on the proxy port, and its
// configuration in SSM parameters (the secrets in a SecureString) that the instance's role reads at boot and
// watches afterwards, so rule changes never replace the instance. An Elastic IP, when asked for, is the stable
// egress address. Clients are built per region on first use.
//
// A proxy's id is aws/<region>/<name>. Its parameters are under /egress-proxy/<name>/: config (a String, the
// config's manifest) and its parts config-1 to config-9, secrets (a SecureString), settings (what Get reads back)
// and its parts, and applied (written by the guest). Its security group is
// egress-proxy-<name>. With CloudWatch Logs, its access log goes to the stream <name> of its own log group
// /egress-proxy/<name> (made with its retention, deleted with the proxy) or of a shared group the user names,
// which the provider never makes or deletes (logs.go#Backend.ensureLogGroup). The agent that runs on the instance, its user-data and the guard that checks what it is
// given are in the guest subpackage.
//
// This comment holds the rules of this backend alone; the contract every backend keeps is in
// internal/backend/CONTRACT.md. References are file#Symbol, from this directory unless they name one;
// blueprint_test.go in internal/backend resolves them.
//
// # The contract on EC2
//
//   - Create makes the parameters, the security group, the instance and the Elastic IP, in that order, so that what
//     identifies the proxy exists before what costs (create.go#Backend.Create). A live instance of the name is
//     found by its Name tag and adopted only as the proxy's owner's and UID's (metadata.go#Backend.findInstance).
//     RunInstances is idempotent across a lost answer by a client token made from the UID, and takes the next token
//     of the UID's sequence when EC2 refuses one whose instance was terminated (create.go#clientTokenN).
//   - A launch EC2 refuses with Quota or Permanent gives back the security group and the parameters
//     (create.go#Backend.giveBack, tested by giveback_test.go#TestRefusedCreateGivesBack). After a Transient or
//     cancelled launch the instance may exist, and the retry's client token finds it.
//   - EC2 and IAM are eventually consistent: a group, an Elastic IP or an instance profile made moments ago may be
//     unknown to the next call. Such an error is retried for two minutes, then Permanent with advice
//     (propagation.go#window.classify).
//   - Each allowed client range is one inbound rule of the proxy's group. Ranges beyond the region's
//     rules-per-group quota are refused before anything is made or changed (rules.go#Backend.checkClientRules), and
//     at plan time (internal/provider/client_rules_aws.go#awsClientRules). With metrics, each metrics range is
//     one more rule on each of the two metrics ports (rules.go#IngressRuleCounts), and the agent runs mtail and
//     the Squid exporter on them (internal/backend/aws/guest/metrics.go#metricsSettings). The plan also refuses settings whose
//     parameters SSM cannot hold (sizes.go#CheckParameterSizes), naming what to reduce.
//   - The config and the settings are packed: compressed and cut into Standard parameters of 4 KB, at most nine,
//     behind a small head (internal/backend/aws/guest/packed.go#Pack), the parts written first
//     (parameters.go#Backend.putParameters), so a typical proxy's parameters are all in SSM's free Standard tier;
//     an overwrite never asks for Standard, so a parameter once Advanced is never refused a downgrade
//     (parameters.go#Backend.putParameter). Delete removes every part a proxy may have
//     (internal/backend/aws/guest/packed.go#ParameterPaths). A proxy launched before configs were packed keeps the
//     format its guest reads: Reconfigure writes its whole config in one parameter, and refuses rules that do not
//     fit it before changing anything (parameters.go#oldFormatTooLarge).
//   - Each proxy's parameters are bound to its instance by a tag (instancebinding.go#TagInstance), so that a role
//     several proxies share, scoped by the documented condition, reads only its own proxy's secrets.
//   - With create_instance_role, each proxy has a role and an instance profile of its own, whose inline policy
//     names its own parameters alone (instancerole.go#instanceRolePolicy), made after its security group and
//     deleted before it, once its instance is terminated (instancerole.go#Backend.deleteInstanceRole), and given
//     back with the rest when the create is refused (create.go#Backend.giveBack). IAM is global: the name
//     carries the region (instancerole.go#instanceRoleName), and its client is signed for the partition's IAM
//     region (instancerole.go#iamRegion).
//   - Delete terminates the instance and waits, releases the Elastic IP it allocated but never the user's
//     (address.go#Backend.releaseOwnAddresses), and deletes the group and the parameters. The group is held a
//     moment by the terminated instance's interface, which is retried; a group another group's rule names is
//     Permanent at once, naming that group and what to remove (delete.go#Backend.heldBy).
//   - DeleteForReplacement keeps the Elastic IP, tagged with the proxy's name, for the successor of that name
//     (delete.go#Backend.DeleteForReplacement). ListByTag lists it while no successor took it, and a security group
//     without its instance, as leftovers whose id Delete accepts (list.go#Backend.listLeftovers); EC2 records no
//     creation time of either, so Create tags them with one (create.go#tagCreated).
//   - A proxy of several instances (Options.Instances above 1) is its first instance, made and read as a proxy of
//     one, and members 1 to n-1 of its Name with TagMember, one per subnet of SubnetIDs, each in its own zone
//     (placement.go#Backend.placementOf), each with its own parameters bound to it (placement.go#memberParameters),
//     launched after the first and adopted by a retry of the same UID (ha.go#Backend.ensureMembers); then a
//     target group health-checked on the health port, an internal Network Load Balancer and its listener
//     (ha_loadbalancer.go#Backend.ensureLoadBalancer). Get reports the members with the target group's health and
//     State from them (ha.go#Backend.readMembers), a member whose instance is shutting down, terminated or no
//     longer listed as Gone (ha.go#memberGone; a stopped one is unhealthy, not Gone), which Update makes again in
//     its subnet and registers with the target group, the others left as they are (ha.go#Backend.restoreMembers),
//     and registers a running member the target group lacks (ha.go#Backend.readBackRegistered). A proxy whose
//     first instance is gone is read through its live member of lowest k (metadata.go#Backend.findProxy), member
//     0 Gone, and Update launches the first again before anything else, its parameters bound to the new instance
//     (restoreMembers, for k = 0); every member carries the proxy's creation time (tagCreated), which the first
//     made again keeps. Update changes the count between two
//     above one in place: fewer deregisters the members above it, waits for the load balancer to drain them,
//     terminates them and deletes their parameters before recording the count; more records it first, and
//     restoreMembers makes the members it lacks (ha_ops.go#Backend.resizeMembers). A new image rolls over the
//     members in place: a surge member of it joins first, then each member's root volume is made again from it
//     by a root volume replacement task, one member at a time out of the target group, the first instance last
//     (ha_ops.go#Backend.rollImage, ha_ops.go#Backend.replaceRoot); Get names both images while they differ
//     (ha.go#membersImage).
//     Reconfigure reaches them one at a time, each applied and
//     healthy before the next (reconfigure.go#Backend.reconfigureMembers); Delete removes the load balancer, the
//     target group and the members first (delete.go#Backend.deleteMembers). The security group is made before
//     them all and deleted after, so ListByTag lists what a crash leaves by it. A proxy of one (no TagInstances)
//     makes no call to Elastic Load Balancing.
//   - Errors: the service's error code first, then the HTTP status and the transport (errors.go#classOf). Limit
//     codes are Quota with advice on what to free (errors.go#quotaCodes, errors.go#QuotaAdvice).
//   - Check reads the caller's identity and the region's vCPU and Elastic IP quotas against what is in use
//     (check.go#Backend.checkRegion).
//
// # A guest applies only what the provider wrote
//
// The config parameter is a String: anyone with ssm:PutParameter on it may overwrite it, and what it says runs as
// root on the proxy. So each write of a config is authenticated with a key held in the secrets parameter, which
// only who may decrypt it can read. The guest applies a config only when its MAC is the one that key gives, refuses
// directives the renderer never writes (any *_program, include, other helpers or files), and reports a refusal in
// the applied parameter, where the wait reads it and fails at once (wait.go#Backend.waitApplied). Get reports Drift
// when the config in force is not the one last written (metadata.go#configDrift), and the next plan writes it
// again.
package aws
