package aws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy's SSM parameters, as the backend writes and reads them: the config (a manifest and its parts, or
// the whole config for a proxy launched before configs were packed: guest/packed.go), the settings Get reads
// back (packed alike), the secrets (a SecureString) and applied (the guest's report). Every value the
// backend writes fits a Standard parameter but the secrets of a large TLS key, and a parameter once
// Advanced is never sent back to Standard.

// parameters are a proxy's config and secrets parameters' values, as rendered for one write.
type parameters struct {
	// format is the config's: the one the proxy's guest reads.
	format guest.ConfigFormat
	// config is the config parameter's value: a manifest (FormatParts) or the whole config (FormatWhole);
	// parts are the config's parts (FormatParts).
	config  []byte
	parts   []string
	secrets []byte
	// configID names the config and secrets together.
	configID string
	// mac is the config's MAC, by which the guest's report of a refusal names this write of the config.
	mac string
}

// renderParameters renders settings for the proxy named name, in format, under a new config key: each
// write of a config has its own, so one that was replaced cannot be written back by whoever kept a copy of it.
func renderParameters(name string, settings proxyconf.Settings, format guest.ConfigFormat) (parameters, error) {
	key, err := guest.NewConfigKey()
	if err != nil {
		return parameters{}, err
	}
	return renderParametersWith(name, settings, format, key)
}

// renderParametersWith renders as renderParameters does, under key.
func renderParametersWith(name string, settings proxyconf.Settings, format guest.ConfigFormat, key []byte) (parameters, error) {
	p := parameters{format: format}
	var err error
	p.config, p.secrets, p.configID, err = guest.RenderParameters(settings, guest.ParameterPath(name, ""), key)
	if err != nil {
		return p, err
	}
	var c guest.Config
	if err := json.Unmarshal(p.config, &c); err != nil {
		return p, err
	}
	p.mac = c.MAC
	if format >= guest.FormatParts {
		p.config, p.parts, err = guest.PackConfig(c)
	}
	return p, err
}

// packedSettings are the settings parameter's value (a head) and its parts' for st.
func packedSettings(st storedSpec) (head string, parts []string, err error) {
	stored, err := json.Marshal(st)
	if err != nil {
		return "", nil, err
	}
	h, parts := guest.Pack(stored)
	head, err = jsonString(h)
	return head, parts, err
}

// ssmParameter is one value to write.
type ssmParameter struct {
	name, value string
	typ         ssmtypes.ParameterType
	key         *string
	// bound: the guest reads it, so it carries the instance's tag (TagInstance) as well.
	bound bool
}

// putParameters writes the proxy's parameters: the settings Get reads back, the configuration and the
// secrets, each tagged like the instance, and those the guest reads also with instanceARN as TagInstance
// when it is known (a reconfiguration: a part the config did not have before must be readable at once by
// the instance's role; Create binds them once the instance exists, bindParameters). A packed value's parts
// go before its head, the config before the secrets that hold its key: a guest that reads between the
// writes finds parts that do not match the manifest it read, or a config its key does not authenticate,
// and reads again later.
func (b *Backend) putParameters(ctx context.Context, r *region, spec backend.Spec, st storedSpec, p parameters, instanceARN string) error {
	params, err := settingsParameters(r, spec, st)
	if err != nil {
		return err
	}
	for i, v := range p.parts {
		params = append(params, ssmParameter{name: guest.PartName(guest.ParameterConfig, i+1), value: v, typ: ssmtypes.ParameterTypeString, bound: true})
	}
	params = append(params,
		ssmParameter{name: guest.ParameterConfig, value: string(p.config), typ: ssmtypes.ParameterTypeString, bound: true},
		ssmParameter{name: guest.ParameterSecrets, value: string(p.secrets), typ: ssmtypes.ParameterTypeSecureString, key: optionalString(st.KMSKeyID), bound: true})
	tags := objectTags(spec)
	boundTags := objectTags(spec)
	if instanceARN != "" {
		boundTags[TagInstance] = instanceARN
	}
	for _, p := range params {
		t := tags
		if p.bound {
			t = boundTags
		}
		if err := b.putParameter(ctx, r, spec, p, ssmTags(t)); err != nil {
			return err
		}
	}
	return nil
}

// settingsParameters are the settings parameter's parts and then its head, as putParameters writes them.
func settingsParameters(r *region, spec backend.Spec, st storedSpec) ([]ssmParameter, error) {
	settingsHead, settingsParts, err := packedSettings(st)
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, instanceObject(r.name, spec.Name), err)
	}
	var params []ssmParameter
	for i, v := range settingsParts {
		params = append(params, ssmParameter{name: guest.PartName(guest.ParameterSettings, i+1), value: v, typ: ssmtypes.ParameterTypeString})
	}
	return append(params, ssmParameter{name: guest.ParameterSettings, value: settingsHead, typ: ssmtypes.ParameterTypeString}), nil
}

// putSettings writes the settings parameter alone (what Get reads back; the guest does not read it), as
// putParameters does: a change of the number of instances, which changes no rule.
func (b *Backend) putSettings(ctx context.Context, r *region, spec backend.Spec, st storedSpec) error {
	params, err := settingsParameters(r, spec, st)
	if err != nil {
		return err
	}
	for _, p := range params {
		if err := b.putParameter(ctx, r, spec, p, ssmTags(objectTags(spec))); err != nil {
			return err
		}
	}
	return nil
}

// putParameter writes one parameter. A new one is made with its tags in one request; one that exists (a
// retried create, a reconfiguration) is overwritten, and tags, which cannot go with an overwrite, are set
// after.
func (b *Backend) putParameter(ctx context.Context, r *region, spec backend.Spec, p ssmParameter, tags []ssmtypes.Tag) error {
	path := guest.ParameterPath(spec.Name, p.name)
	obj := parameterObject(r.name, path)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in := &ssm.PutParameterInput{
			Name: awssdk.String(path), Value: awssdk.String(p.value), Type: p.typ, Tags: tags, KeyId: p.key,
			Tier: tierFor(p.value), Description: awssdk.String("egress proxy " + spec.Name + ": " + p.name),
		}
		_, err := r.ssm.PutParameter(ctx, in)
		if errorCode(err) != "ParameterAlreadyExists" {
			return classify(obj, err)
		}
		// Overwritten only when the parameter is this owner's: another team's proxy of the same name keeps
		// its configuration and secrets.
		if err := b.checkParameterOwner(ctx, r, path, backend.Ownership{Owner: spec.Owner}); err != nil {
			return err
		}
		in.Tags, in.Overwrite = nil, awssdk.Bool(true)
		if in.Tier == ssmtypes.ParameterTierStandard {
			// No tier on an overwrite that fits Standard: the parameter keeps its own. Asking for Standard
			// would downgrade an Advanced one (a config an earlier provider wrote whole), which SSM refuses
			// ("Managing parameter tiers": an advanced parameter cannot be reverted to a standard one).
			in.Tier = ""
		}
		if _, err := r.ssm.PutParameter(ctx, in); err != nil {
			return classify(obj, err)
		}
		_, err = r.ssm.AddTagsToResource(ctx, &ssm.AddTagsToResourceInput{
			ResourceType: ssmtypes.ResourceTypeForTaggingParameter, ResourceId: awssdk.String(path), Tags: tags,
		})
		return classify(obj, err)
	})
}

// getParameters reads the parameters of paths that exist, in calls of at most ten names (GetParameters'
// limit), without decrypting: only Strings are read this way.
func (b *Backend) getParameters(ctx context.Context, r *region, obj string, paths []string) (map[string]string, error) {
	values := map[string]string{}
	for len(paths) > 0 {
		batch := paths[:min(len(paths), 10)]
		paths = paths[len(batch):]
		var out *ssm.GetParametersOutput
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) (err error) {
			out, err = r.ssm.GetParameters(ctx, &ssm.GetParametersInput{Names: batch})
			return classify(obj, err)
		})
		if err != nil {
			return nil, err
		}
		for _, p := range out.Parameters {
			values[awssdk.ToString(p.Name)] = awssdk.ToString(p.Value)
		}
	}
	return values, nil
}

// partPaths are the paths of the parts a head names (at most guest.MaxParts: a head that names more was not
// written by this provider, which drift tells), under the proxy's parameter base.
func partPaths(name, base string, h guest.PackedHead) []string {
	var paths []string
	for i := 1; i <= min(h.Parts, guest.MaxParts); i++ {
		paths = append(paths, guest.ParameterPath(name, guest.PartName(base, i)))
	}
	return paths
}

// unpackedValue is what the packed value of the parameter base holds, read from values (the head's and the
// parts' values by path); false when its head is not a head or its parts do not match it.
func unpackedValue(name, base string, values map[string]string) ([]byte, bool) {
	h, ok := guest.ParseHead(values[guest.ParameterPath(name, base)])
	if !ok {
		return nil, false
	}
	var parts []string
	for _, path := range partPaths(name, base, h) {
		v, ok := values[path]
		if !ok {
			return nil, false
		}
		parts = append(parts, v)
	}
	b, err := guest.Unpack(h, parts)
	return b, err == nil
}

// checkParameterOwner refuses, naming both owners, a parameter whose tags say it is not want's.
func (b *Backend) checkParameterOwner(ctx context.Context, r *region, path string, want backend.Ownership) error {
	tags, err := b.parameterTags(ctx, r, path)
	if err != nil {
		return err
	}
	return want.Check(parameterObject(r.name, path), tags[backend.LabelOwner], tags[backend.LabelUID])
}

// parameterTags are a parameter's tags; none when there is no such parameter.
func (b *Backend) parameterTags(ctx context.Context, r *region, path string) (map[string]string, error) {
	out, err := r.ssm.ListTagsForResource(ctx, &ssm.ListTagsForResourceInput{
		ResourceType: ssmtypes.ResourceTypeForTaggingParameter, ResourceId: awssdk.String(path),
	})
	if errorCode(err) == "InvalidResourceId" {
		return nil, nil
	}
	if err != nil {
		return nil, classify(parameterObject(r.name, path), err)
	}
	tags := map[string]string{}
	for _, t := range out.TagList {
		tags[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	return tags, nil
}

// maxStandardParameter is the largest value of a Standard parameter; Advanced ones hold 8 KB
// ("Managing parameter tiers").
const maxStandardParameter = 4096

// tierFor picks the Standard tier (free) where the value fits, Advanced otherwise.
func tierFor(value string) ssmtypes.ParameterTier {
	if len(value) <= maxStandardParameter {
		return ssmtypes.ParameterTierStandard
	}
	return ssmtypes.ParameterTierAdvanced
}

func ssmTags(m map[string]string) []ssmtypes.Tag {
	tags := make([]ssmtypes.Tag, 0, len(m))
	for _, t := range ec2Tags(m) {
		tags = append(tags, ssmtypes.Tag{Key: t.Key, Value: t.Value})
	}
	return tags
}

// oldGuestClientCA is Reconfigure's refusal of a client CA or CRL for a proxy whose guest does not install
// them (launched before guest.FormatClientCA): it would find the config not authenticated and never apply it.
func oldGuestClientCA(obj string) error {
	return &backend.Error{Class: backend.ClassPermanent, Object: obj,
		Err: errors.New("its guest was launched by an earlier version of this provider, whose agent does not install a client CA or CRL"),
		Advice: "Replace the proxy (terraform apply -replace=<address>) to launch it with the current guest, or leave tls.client_ca_pem " +
			"and tls.client_crl_pem unset. Nothing was changed: the proxy keeps its rules."}
}

// oldFormatTooLarge is Reconfigure's refusal of rules that a proxy in FormatWhole cannot take.
func oldFormatTooLarge(obj string, chars int) error {
	return &backend.Error{Class: backend.ClassPermanent, Object: obj,
		Err: fmt.Errorf("its guest was launched by an earlier version of this provider and reads its whole config from one SSM parameter, "+
			"which holds at most %d characters; the new rules take %d", maxAdvancedParameter, chars),
		Advice: "Replace the proxy (terraform apply -replace=<address>) to launch it with the current guest, which reads larger configs " +
			"in parts, or change fewer rules. Nothing was changed: the proxy keeps its rules."}
}
