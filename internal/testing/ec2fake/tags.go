package ec2fake

import (
	"strings"
	"unicode/utf8"
)

// Tag restrictions ("Tag your Amazon EC2 resources", Tag restrictions): at most 50 tags a resource, keys
// unique per resource, keys 1 to 128 Unicode characters, values 0 to 256, the aws: prefix reserved for
// AWS's own tags.
const (
	MaxTags        = 50
	MaxTagKeyLen   = 128
	MaxTagValueLen = 256
)

func checkTag(t tagKV) *apiError {
	switch n := utf8.RuneCountInString(t.Key); {
	case n == 0:
		return ec2Err("InvalidParameterValue", "Tag key cannot be empty.")
	case n > MaxTagKeyLen:
		return ec2Err("InvalidParameterValue", "Tag key exceeds the maximum length of %d characters.", MaxTagKeyLen)
	}
	if utf8.RuneCountInString(t.Value) > MaxTagValueLen {
		return ec2Err("InvalidParameterValue", "Tag value exceeds the maximum length of %d characters.", MaxTagValueLen)
	}
	if strings.HasPrefix(strings.ToLower(t.Key), "aws:") {
		return ec2Err("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use")
	}
	return nil
}

// specTags checks one TagSpecification's tags and returns them as a map.
func specTags(spec tagSpec) (map[string]string, *apiError) {
	if len(spec.Tags) == 0 {
		return nil, ec2Err("InvalidParameterValue", "Tag specification must have at least one tag")
	}
	if len(spec.Tags) > MaxTags {
		return nil, ec2Err("TagLimitExceeded", "The maximum number of Tags for a resource has been reached.")
	}
	out := map[string]string{}
	for _, t := range spec.Tags {
		if e := checkTag(t); e != nil {
			return nil, e
		}
		if _, dup := out[t.Key]; dup {
			return nil, ec2Err("InvalidParameterValue", "Duplicate tag key '%s' specified.", t.Key)
		}
		out[t.Key] = t.Value
	}
	return out, nil
}

// tagsFor reads the TagSpecifications of an action that creates one kind of resource.
func tagsFor(f form, resourceType string) (map[string]string, *apiError) {
	var out map[string]string
	for _, spec := range f.tagSpecs() {
		if spec.ResourceType != resourceType {
			return nil, invalidTaggable(spec.ResourceType)
		}
		tags, e := specTags(spec)
		if e != nil {
			return nil, e
		}
		out = mergeTags(out, tags)
	}
	return out, nil
}

func invalidTaggable(resourceType string) *apiError {
	return ec2Err("InvalidParameterValue", "'%s' is not a valid taggable resource type for this operation.", resourceType)
}

func mergeTags(dst, src map[string]string) map[string]string {
	if dst == nil && len(src) > 0 {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// taggable finds the tags of the resource an id names, by its prefix.
func (rg *region) taggable(id string) (*map[string]string, *apiError) {
	prefix, _, _ := strings.Cut(id, "-")
	switch prefix {
	case "i":
		if e := checkInstanceIDs(rg, []string{id}); e != nil {
			return nil, e
		}
		return &rg.instances[id].Tags, nil
	case "vol":
		if v := rg.volumes[id]; v != nil {
			return &v.Tags, nil
		}
		return nil, ec2Err("InvalidVolume.NotFound", "The volume '%s' does not exist.", id)
	case "sg":
		g, e := rg.groupByID(id)
		if e != nil {
			return nil, e
		}
		return &g.Tags, nil
	case "eipalloc":
		if a := rg.addresses[id]; a != nil {
			return &a.Tags, nil
		}
		return nil, ec2Err("InvalidAllocationID.NotFound", "The allocation ID '%s' does not exist", id)
	case "subnet":
		if sn := rg.subnets[id]; sn != nil {
			return &sn.Tags, nil
		}
		return nil, ec2Err("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
	case "vpc", "r", "sgr", "ami", "eni":
		return nil, notModelled("tags on " + prefix + "- resources")
	}
	return nil, ec2Err("InvalidID", "The ID '%s' is not valid", id)
}

// createTags adds or overwrites tags ("EC2 API Reference: CreateTags"): all resources or none.
func (s *Server) createTags(rg *region, f form) (any, *apiError) {
	defer rg.seeOne()
	ids := f.list("ResourceId")
	if len(ids) == 0 {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter ResourceId")
	}
	tags := f.tags("Tag")
	if len(tags) == 0 {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter Tag")
	}
	for _, t := range tags {
		if e := checkTag(t); e != nil {
			return nil, e
		}
	}
	var targets []*map[string]string
	for _, id := range ids {
		m, e := rg.taggable(id)
		if e != nil {
			return nil, e
		}
		merged := copyTags(*m)
		for _, t := range tags {
			merged = mergeTags(merged, map[string]string{t.Key: t.Value})
		}
		if len(merged) > MaxTags {
			return nil, ec2Err("TagLimitExceeded", "The maximum number of Tags for a resource has been reached.")
		}
		targets = append(targets, m)
	}
	for _, m := range targets {
		for _, t := range tags {
			*m = mergeTags(*m, map[string]string{t.Key: t.Value})
		}
	}
	return &returnXML{Return: true}, nil
}

// deleteTags removes tags ("EC2 API Reference: DeleteTags"): a key alone removes it whatever its value, a
// key with a value only when it has that value, no Tag at all every tag but AWS's own.
func (s *Server) deleteTags(rg *region, f form) (any, *apiError) {
	ids := f.list("ResourceId")
	if len(ids) == 0 {
		return nil, ec2Err("MissingParameter", "The request must contain the parameter ResourceId")
	}
	var targets []*map[string]string
	for _, id := range ids {
		m, e := rg.taggable(id)
		if e != nil {
			return nil, e
		}
		targets = append(targets, m)
	}
	tags := f.tags("Tag")
	for _, m := range targets {
		if len(tags) == 0 {
			for k := range *m {
				if !strings.HasPrefix(k, "aws:") {
					delete(*m, k)
				}
			}
			continue
		}
		for _, t := range tags {
			if v, ok := (*m)[t.Key]; ok && (!t.hasValue || v == t.Value) {
				delete(*m, t.Key)
			}
		}
	}
	return &returnXML{Return: true}, nil
}
