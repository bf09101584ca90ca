package gcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// rendered is everything the guest reads from metadata for one set of settings.
type rendered struct {
	squidConf, htpasswd []byte
	tlsCert, tlsKey     []byte
	clientCA, clientCRL string // no secrets: in metadata on every VM
	backstop            []byte
	// metrics are the metrics programs' files (vmguest.MetricsFiles), by metadata key; none without metrics.
	metrics  map[string]string
	configID string
	spec     []byte
	// secret, when set, names the Secret Manager secret that holds htpasswd and tlsKey (secrets.go): the
	// metadata then names it and holds neither.
	secret string
}

// renderProxy renders the files for settings. squid.conf refuses the addresses the startup script lists at
// every boot; the stored spec keeps no secret.
func renderProxy(s proxyconf.Settings, stored storedSpec, secret string) (rendered, error) {
	var r rendered
	var err error
	opts := vmguest.MetricsSquidOptions(s, vmguest.RenderOptions())
	if r.squidConf, err = proxyconf.RenderSquidConf(s, opts); err != nil {
		return r, err
	}
	r.metrics = metricsItems(vmguest.MetricsFiles(s, opts.ManagerPort))
	if r.backstop, err = proxyconf.RenderNftables(s); err != nil {
		return r, err
	}
	if len(s.Users) > 0 {
		if r.htpasswd, err = proxyconf.RenderHtpasswd(s.Users); err != nil {
			return r, err
		}
	}
	if s.TLS != nil {
		r.tlsCert, r.tlsKey = []byte(s.TLS.CertificatePEM), []byte(s.TLS.PrivateKeyPEM)
		r.clientCA, r.clientCRL = s.TLS.ClientCAPEM, s.TLS.ClientCRLPEM
	}
	r.configID = withMetrics(vmguest.WithClientCA(vmguest.ConfigID(r.squidConf, r.htpasswd, r.tlsCert, r.tlsKey, r.backstop), r.clientCA, r.clientCRL), r.metrics)
	if stored.SecretManager && (r.htpasswd != nil || r.tlsKey != nil) {
		r.secret = secret
	}
	if r.spec, err = json.Marshal(stored.withSettings(s)); err != nil {
		return r, err
	}
	return r, nil
}

// items replaces the proxy's keys in existing metadata items, keeping any other key as it is. The startup
// script and the user-data that runs it are written every time, so that a VM made by an earlier version of
// the provider runs the current script from its next boot on (and its user-data no longer holds the
// settings and secrets it once did).
func (r rendered) items(existing []*computepb.Items) []*computepb.Items {
	ours := map[string]string{
		gcpguest.MetadataSquidConf:     string(r.squidConf),
		gcpguest.MetadataBackstop:      string(r.backstop),
		gcpguest.MetadataConfigID:      r.configID,
		gcpguest.MetadataStartupScript: string(startupScript),
		gcpguest.MetadataUserData:      string(startupUserData),
		metadataSpec:                   string(r.spec),
		// The guest reports through guest attributes; an earlier version's VM gets the key at its next change.
		MetadataEnableGuestAttributes: metadataTrue,
	}
	if r.tlsCert != nil {
		ours[gcpguest.MetadataTLSCert] = string(r.tlsCert)
	}
	if r.clientCA != "" {
		ours[gcpguest.MetadataClientCA] = r.clientCA
	}
	if r.clientCRL != "" {
		ours[gcpguest.MetadataClientCRL] = r.clientCRL
	}
	maps.Copy(ours, r.metrics)
	switch {
	case r.secret != "":
		ours[metadataSecret] = r.secret
	default:
		// The fallback of a VM without a service account: whoever may read the instance reads these.
		if r.htpasswd != nil {
			ours[gcpguest.MetadataHtpasswd] = string(r.htpasswd)
		}
		if r.tlsKey != nil {
			ours[gcpguest.MetadataTLSKey] = string(r.tlsKey)
		}
	}
	var out []*computepb.Items
	for _, it := range existing {
		// Keys only some configs have (a password, TLS, a secret) go when the new config has none, and the
		// secrets a proxy once kept in metadata go once they are in Secret Manager.
		switch it.GetKey() {
		case gcpguest.MetadataHtpasswd, gcpguest.MetadataTLSCert, gcpguest.MetadataTLSKey, metadataSecret,
			gcpguest.MetadataClientCA, gcpguest.MetadataClientCRL, gcpguest.MetadataMtailProgram, gcpguest.MetadataMtailDropIn,
			gcpguest.MetadataSquidExporterDropIn, gcpguest.MetadataActiveScript, gcpguest.MetadataActiveUnit:
			continue
		}
		if _, mine := ours[it.GetKey()]; mine {
			continue
		}
		out = append(out, it)
	}
	for _, k := range sortedKeys(ours) {
		out = append(out, &computepb.Items{Key: proto.String(k), Value: proto.String(ours[k])})
	}
	return out
}

// metricsItems puts the metrics programs' files under their metadata keys, where the startup script reads them
// (gcpguest.MetricsKeys).
func metricsItems(files []vmguest.File) map[string]string {
	if len(files) == 0 {
		return nil
	}
	keys := map[string]string{}
	for k, path := range gcpguest.MetricsKeys {
		keys[path] = k
	}
	out := map[string]string{}
	for _, f := range files {
		out[keys[f.Path]] = string(f.Content)
	}
	return out
}

// withMetrics is id, or with metrics an id that names the metrics files too, so that the guest applies a new
// program. A proxy without metrics keeps the id it had before metrics existed: its guest applies nothing anew.
func withMetrics(id string, items map[string]string) string {
	if len(items) == 0 {
		return id
	}
	h := sha256.New()
	h.Write([]byte(id))
	for _, k := range sortedKeys(items) {
		_, _ = fmt.Fprintf(h, "\n%s %d\n", k, len(items[k])) // a hash never fails to write
		h.Write([]byte(items[k]))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func metadataValue(in *computepb.Instance, key string) (string, bool) {
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == key {
			return it.GetValue(), true
		}
	}
	return "", false
}

// stateOf maps Compute Engine's instance status onto the contract's states.
func stateOf(status string) backend.State {
	switch status {
	case "PROVISIONING", "STAGING", "REPAIRING":
		return backend.StatePending
	case "RUNNING":
		return backend.StateRunning
	case "STOPPING", "SUSPENDING", "SUSPENDED", "TERMINATED", "STOPPED":
		return backend.StateStopped
	}
	return backend.StateUnknown
}

func lastSegment(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

// toInstance maps an instance onto the contract. An instance without the provider's labels is someone else's:
// Permanent, never NotFound, so Terraform does not create over it.
func toInstance(projectID string, in *computepb.Instance) (backend.Instance, error) {
	zone := lastSegment(in.GetZone())
	labels := in.GetLabels()
	if labels[backend.LabelManagedBy] != backend.ManagedByValue {
		return backend.Instance{}, backend.Permanent(instanceObject(projectID, zone, in.GetName()), "exists but was not made by this provider (no %s label)", backend.LabelManagedBy)
	}
	out := backend.Instance{
		ID:     backend.ProviderID{Backend: Kind, Target: projectID, Scope: zone, Name: in.GetName()},
		Name:   in.GetName(),
		UID:    labels[backend.LabelUID],
		Owner:  labels[backend.LabelOwner],
		Labels: backend.UserLabels(labels),
		State:  stateOf(in.GetStatus()),
		Port:   proxyconf.DefaultPort,
	}
	if t, err := time.Parse(time.RFC3339, in.GetCreationTimestamp()); err == nil {
		out.CreatedAt = t
	}
	pl := &Options{MachineType: lastSegment(in.GetMachineType())}
	if nics := in.GetNetworkInterfaces(); len(nics) > 0 {
		out.InternalAddress = nics[0].GetNetworkIP()
		pl.Network = trimLink(nics[0].GetNetwork())
		pl.Subnetwork = trimLink(nics[0].GetSubnetwork())
		if acs := nics[0].GetAccessConfigs(); len(acs) > 0 {
			// The one-to-one NAT address: the source destinations see, and where clients outside connect.
			out.EgressAddress = acs[0].GetNatIP()
			out.IngressAddress = out.EgressAddress
		}
	}
	pl.NetworkTags = in.GetTags().GetItems()
	if sas := in.GetServiceAccounts(); len(sas) > 0 {
		pl.ServiceAccount = sas[0].GetEmail()
		pl.Scopes = sas[0].GetScopes()
	}
	pl.Preemptible = in.GetScheduling().GetPreemptible()
	pl.Spot = in.GetScheduling().GetProvisioningModel() == "SPOT"
	readHardening(in, pl)
	_, pl.CloudLogging = metadataValue(in, gcpguest.MetadataCloudLogging)
	if st, ok := readStoredSpec(in); ok {
		s := st.settings(in)
		out.Proxy = &s
		out.Port = s.Port
		pl.Image = st.Image
		pl.StaticEgressIP = st.StaticEgressIP
		pl.EgressAddressName = st.EgressAddressName
		// The settings live in metadata that the guest's watcher re-reads: every instance made by this
		// backend can change its rules in place.
		out.Reconfigurable = true
	}
	out.Placement = backend.Placement{Backend: Kind, Target: projectID, Scope: zone, Options: pl}
	return out, nil
}

// trimLink shortens a resource URL to its "global/networks/x" or "regions/r/subnetworks/x" form.
func trimLink(url string) string {
	for _, marker := range []string{"/global/", "/regions/"} {
		if i := strings.Index(url, marker); i >= 0 {
			return url[i+1:]
		}
	}
	return url
}

// zoneLink and friends build the partial URLs the API accepts in request bodies.
func machineTypeLink(zone, machineType string) string {
	if strings.Contains(machineType, "/") {
		return machineType
	}
	return fmt.Sprintf("zones/%s/machineTypes/%s", zone, machineType)
}
