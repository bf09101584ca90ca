package gcp

import (
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// What every proxy VM gets unless its placement opts out. A proxy is a VM that nobody needs to log in to:
// Shielded VM makes its boot chain verifiable, and the two metadata keys keep SSH keys from the project's
// metadata off it and leave SSH access to IAM (OS Login).
const (
	DefaultShieldedVM          = true
	DefaultOSLogin             = true
	DefaultAllowProjectSSHKeys = false
)

// Compute Engine's guest environment reads these instance metadata keys; "TRUE" turns each on.
const (
	MetadataBlockProjectSSHKeys = "block-project-ssh-keys"
	MetadataEnableOSLogin       = "enable-oslogin"
	metadataTrue                = "TRUE"
)

// MetadataEnableGuestAttributes lets the VM write guest attributes, where its startup script reports the
// config it applied. They are off unless this key is TRUE on the instance or the project ("Setting and
// querying guest attributes"), and the instance's value wins over the project's: every proxy VM sets it, at
// insert and at every metadata change, so neither a project without it nor one that sets FALSE silences it.
const MetadataEnableGuestAttributes = "enable-guest-attributes"

// shieldedConfig is the insert body's Shielded VM part: all three features, or none sent at all, which
// leaves the image's and the project's defaults.
func shieldedConfig(g *Options) *computepb.ShieldedInstanceConfig {
	if g.DisableShieldedVM {
		return nil
	}
	return &computepb.ShieldedInstanceConfig{
		EnableSecureBoot: proto.Bool(true), EnableVtpm: proto.Bool(true), EnableIntegrityMonitoring: proto.Bool(true),
	}
}

// hardeningItems are the metadata items of the defaults the placement keeps. An opted-out key is not set at
// all, so the project's metadata decides, as for any VM.
func hardeningItems(g *Options) []*computepb.Items {
	var out []*computepb.Items
	if !g.AllowProjectSSHKeys {
		out = append(out, &computepb.Items{Key: proto.String(MetadataBlockProjectSSHKeys), Value: proto.String(metadataTrue)})
	}
	if !g.DisableOSLogin {
		out = append(out, &computepb.Items{Key: proto.String(MetadataEnableOSLogin), Value: proto.String(metadataTrue)})
	}
	return out
}

// readHardening reads back from the instance which defaults it has, so that an import, or a VM made before
// these defaults existed, shows what it really is.
func readHardening(in *computepb.Instance, pl *Options) {
	sc := in.GetShieldedInstanceConfig()
	pl.DisableShieldedVM = !sc.GetEnableSecureBoot() || !sc.GetEnableVtpm() || !sc.GetEnableIntegrityMonitoring()
	on := func(key string) bool {
		v, _ := metadataValue(in, key)
		return strings.EqualFold(strings.TrimSpace(v), metadataTrue)
	}
	pl.AllowProjectSSHKeys = !on(MetadataBlockProjectSSHKeys)
	pl.DisableOSLogin = !on(MetadataEnableOSLogin)
}
