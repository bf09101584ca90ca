// Package kvm runs egress proxies as libvirt domains: a qcow2 overlay on a base volume, a NoCloud seed ISO and a
// domain whose metadata says whose it is. It talks to libvirtd over its RPC protocol in pure Go
// (github.com/digitalocean/go-libvirt), through the narrow api interface, one lazily dialled connection per
// configured host.
//
// A proxy is the domain, its root overlay <name>-root.qcow2, its seed ISO <name>-seed.iso and, with a fixed IP, a
// DHCP host reservation on its libvirt network. Its id is kvm/<host>/<name>. Image volumes, made from an image file
// or URL, are shared by every proxy of the same content and never deleted by the provider. What the guest runs (its
// cloud-init user-data) is in the guest subpackage.
//
// This comment holds the rules of this backend alone; the contract every backend keeps is in
// internal/backend/CONTRACT.md. References are file#Symbol, from this directory unless they name one;
// blueprint_test.go in internal/backend resolves them.
//
// # The contract on libvirt
//
//   - libvirt has no labels. The labels, owner, UID and creation time are a namespaced element of the domain XML
//     (metadata.go#newMetadata) with a copy inside the seed ISO (volumes.go#readSeedIdentity). A domain without
//     that element is not the provider's: Get refuses it as Permanent (backend.go#readMetadata).
//   - Create writes the seed volume first, since it carries the identity, then the root overlay, the reservation,
//     and defines the domain last (create.go#Backend.Create), so a crash at any point leaves an attributable
//     leftover, which a retry clears (create.go#clearLeftoverSeed) and ListByTag reports (list.go#leftoverSeeds).
//   - Delete works from whatever a crashed Create left, with the host's defaults standing in for the missing
//     metadata (delete.go#Backend.Delete); that is why it finds leftovers only in the host's default pool.
//   - Update refuses a Spec whose UID is not the domain's (backend.go#Backend.Update).
//   - Reconfigure goes through the guest agent; a proxy is Reconfigurable only when the agent answered
//     (agent.go#reconfigurable). Update changes the access log's syslog target the same way
//     (accesslog.go#applySyslogTarget): the guest's rsyslog follows Squid's access log file into the journal
//     on every proxy, and forwards it to the target when there is one
//     (internal/backend/kvm/guest/accesslog.go#RenderAccessLog).
//   - The egress address is the guest's own only where its packets leave unchanged: a host bridge, or a libvirt
//     network whose forward mode routes or bridges (route, open, bridge, passthrough, private, vepa, hostdev). None
//     behind NAT, unless the network pins its NAT to one address, which is reported instead; none with user_net or
//     on an isolated network (network_mode.go#egressOfForward). Each network's mode is read once per host and
//     provider process, concurrent reads sharing one (network_mode.go#networkEgresses).
//   - A proxy of several instances (Options.Instances > 1) is that many domains on one host and one libvirt
//     network, <name> and <name>-2 on, behind a virtual address that keepalived in the guests moves by VRRP
//     (internal/backend/kvm/guest/vrrp.go#VRRPFiles). The virtual address and each instance's address are DHCP
//     host reservations, picked among the network's addresses no reservation or lease holds
//     (ha.go#reserveGroup), recorded in every instance's metadata (ha.go#metaHA). Get reports one Member per
//     instance, healthy when its domain runs and its Squid answers (ha_ops.go#Backend.getGroup); Reconfigure
//     reaches the instances one at a time, each confirmed before the next (reconfigure.go#Backend.Reconfigure);
//     Delete removes every instance and the reservations (ha_ops.go#Backend.deleteGroup); ListByTag reports the
//     proxy once with its members (list.go#groupListed). Every instance's metadata records the whole proxy, so
//     a proxy whose instance 0's domain is gone is read from another instance's (ha_ops.go#orphanedGroup):
//     Get reports it Degraded with instance 0 Gone, Update makes instance 0 again, Delete removes the rest. A new image rolls over the instances one at a time, instance 0 last: each that
//     serves hands the address over first (internal/backend/kvm/guest/vrrp.go#Retire), then boots from a new root
//     disk and is waited for until it serves and its keepalived runs; its metadata records the image last, so an
//     Update run again after a cut goes on where it stopped (ha_ops.go#Backend.rollImage), and Get names both
//     volumes while the instances run two (ha.go#mixedBaseVolume). A proxy of one has no group and runs no VRRP:
//     its metadata and seed are what they were before instances existed.
//   - Errors: libvirt's codes first (errors.go#codeClasses), text only where QEMU or the host speaks through
//     libvirt (errors.go#quotaPhrases). A proxy asking for more memory than the host has at all is refused before
//     anything is made (create.go#checkMemory), and a Quota error says what to free (placement.go#QuotaAdvice,
//     errors.go#withAdvice). A pool, network or base volume a create names and the host lacks is Permanent with
//     advice (errors.go#missingOnHost). Transport errors are Transient (errors.go#isTransportError); a host that
//     stays unreachable after a bounded dial retry is Permanent, naming the host and what to check
//     (errors.go#classOf). A connection the host refuses (the socket's permissions, polkit) is Permanent at once,
//     with advice on what the user needs there and PermissionsDocument (errors.go#accessDenied).
//
// # go-libvirt and libvirt, as met here
//
//   - A call that cannot be cancelled. go-libvirt calls take no context: conn.do returns at ctx's end, lets the
//     call run for callGrace, then closes the connection, and a call that fails on a lost connection is reported as
//     such and redialled next time (conn.go#conn.do). A caller's deadline must not be taken for "host unreachable".
//   - A client library that deadlocks. go-libvirt's reader can hold its callbacks lock forever after a volume
//     download's end (libvirt 9.0 sends one more packet for the stream), and then every call on that connection
//     waits; closing the socket does not free it. conn.do gives up on a stream that moves no data and on calls
//     still stuck callGrace after their connection was lost, and the operation goes on over a new connection. Bound
//     a call by its progress, not only by the caller's deadline.
//   - A volume read while libvirt still makes it. libvirt 9.0 lists a dir-pool volume as soon as its create starts,
//     but answers "no storage vol" when it is read before its build (qemu-img) ends. Read as absent, it sent every
//     waiting process of an image download back to the server for another copy, once per read
//     (image_download.go#readURLImageVolumes). An object another process is making is "not ready yet", and is
//     polled.
//   - An image volume that must never be taken half written. libvirt has no volume metadata and no rename, so an
//     image volume is named after its content's hash (and, for a download, the size the server announced), and the
//     last bytes of the stream are held back until the hash matches: a volume is complete exactly when its size is
//     the image's (the protocol written above imagevol.go#imageFlights; for a download
//     image_download.go#urlVolumeName and image.go#verifyingReader). A crash leaves a volume too small, which the
//     next create waits for and deletes once it stops growing.
package kvm
