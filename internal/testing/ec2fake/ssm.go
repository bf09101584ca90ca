package ec2fake

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The SSM JSON 1.1 API ("AWS Systems Manager API Reference"): a POST of a JSON body with
// X-Amz-Target: AmazonSSM.<Action> and Content-Type application/x-amz-json-1.1, answered with JSON; errors
// are 400 (500 for InternalServerError) with {"__type": code, "message": words}.

const ssmTargetPrefix = "AmazonSSM."

type ssmHandler func(s *Server, rg *region, body []byte) (any, *apiError)

// ssmActions are the actions the fake serves; any other target is UnknownOperationException.
var ssmActions = map[string]ssmHandler{
	"PutParameter":        (*Server).putParameter,
	"GetParameter":        (*Server).getParameter,
	"GetParameters":       (*Server).getParameters,
	"DeleteParameters":    (*Server).deleteParameters,
	"AddTagsToResource":   (*Server).addTagsToResource,
	"ListTagsForResource": (*Server).listTagsForResource,
	"GetParametersByPath": (*Server).getParametersByPath,
}

// Parameter Store's limits (SSM API Reference: PutParameter, Name, Value and Tier; "Requirements and
// constraints for parameter names" in the Systems Manager user guide).
const (
	MaxParameterNameLen  = 1011 // including the ARN before the name
	MaxHierarchyLevels   = 15
	MaxStandardValueLen  = 4096
	MaxAdvancedValueLen  = 8192
	MaxParameterVersions = 100
	MaxSSMTags           = 50
	DefaultParameterKey  = "alias/aws/ssm"
)

// Parameter is an SSM parameter as the fake holds it: Value is the plain text, whatever the Type.
type Parameter struct {
	Name, Type, Value, Tier, DataType, Description, KeyID, AllowedPattern string
	Version                                                               int64
	LastModified                                                          time.Time
	Tags                                                                  map[string]string
}

type parameter struct {
	Parameter
	public  bool
	history []Parameter // earlier versions, oldest first
}

// kmsKeyIDRE is the shape of a KMS key identifier PutParameter's KeyId takes (R44): a key id, a key ARN,
// an alias name or an alias ARN.
var kmsKeyIDRE = regexp.MustCompile(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32}|alias/[a-zA-Z0-9/_-]+|` +
	`arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key/[0-9a-z-]+|alias/[a-zA-Z0-9/_-]+))$`)

func ssmErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	if code == "InternalServerError" {
		status = http.StatusInternalServerError
	}
	if code == "NotImplemented" {
		status = http.StatusNotImplemented
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, out any, requestID string) {
	b, err := json.Marshal(out)
	if err != nil {
		panic(fmt.Sprintf("ec2fake: encoding an SSM answer: %v", err))
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", requestID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// writeJSONError writes an error of a JSON 1.1 service: its code in __type, its words in messageMember,
// which SSM names message and Service Quotas Message.
func writeJSONError(w http.ResponseWriter, e *apiError, requestID, messageMember string) {
	b, _ := json.Marshal(map[string]string{"__type": e.code, messageMember: e.message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", requestID)
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// decode reads a request body strictly: a field the fake does not know is not modelled (501), a value of
// the wrong type is SerializationException.
func decode(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return ssmErr("NotImplemented", "ec2fake does not model the request's %s", strings.TrimPrefix(err.Error(), "json: unknown "))
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return ssmErr("SerializationException", "Start of structure or map found where not expected: %s", te.Field)
		}
		return ssmErr("SerializationException", "%v", err)
	}
	return nil
}

var (
	paramNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.\-/]+$`)
	ssmTagRE    = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)
)

const nameRuleWords = `Parameter name: can't be prefixed with "aws" or "ssm" (case-insensitive). If formed as a path, it can consist of sub-paths divided by slash symbol; each sub-path can be formed as a mix of letters, numbers and the following 3 symbols .-_`

func (s *Server) paramArnPrefix(rg *region) string {
	return "arn:aws:ssm:" + rg.name + ":" + s.opts.AccountID + ":parameter"
}

func (s *Server) paramArn(rg *region, name string) string {
	if strings.HasPrefix(name, "/") {
		return s.paramArnPrefix(rg) + name
	}
	return s.paramArnPrefix(rg) + "/" + name
}

// checkName applies the naming constraints of PutParameter's Name: letters, digits and _.-/ only, a path
// starting with '/', at most 15 levels, not prefixed with aws or ssm (any case) unless reading AWS's own
// public parameters, at most 1011 characters counting the ARN before it. It returns the name with the
// spaces the service trims trimmed.
func (s *Server) checkName(rg *region, name string, reading bool) (string, *apiError) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", ssmErr("ValidationException", "1 validation error detected: Value at 'name' failed to satisfy constraint: Member must have length greater than or equal to 1")
	}
	if len(s.paramArnPrefix(rg))+1+len(strings.TrimPrefix(name, "/")) > MaxParameterNameLen {
		return "", ssmErr("ValidationException", "Parameter name: can't be longer than %d characters, counting the ARN before it (%s).", MaxParameterNameLen, s.paramArnPrefix(rg)+"/")
	}
	if !paramNameRE.MatchString(name) {
		return "", ssmErr("ValidationException", "%s", nameRuleWords)
	}
	if strings.Contains(name, "/") && !strings.HasPrefix(name, "/") {
		return "", ssmErr("ValidationException", "Parameter name must be a fully qualified name.")
	}
	segments := strings.Split(strings.TrimPrefix(name, "/"), "/")
	for _, seg := range segments {
		if seg == "" {
			return "", ssmErr("ValidationException", "%s", nameRuleWords)
		}
	}
	first := strings.ToLower(segments[0])
	public := reading && strings.HasPrefix(name, "/aws/")
	if (strings.HasPrefix(first, "aws") || strings.HasPrefix(first, "ssm")) && !public {
		return "", ssmErr("ValidationException", "%s", nameRuleWords)
	}
	if len(segments) > MaxHierarchyLevels {
		return "", ssmErr("HierarchyLevelLimitExceededException", "A hierarchy can have a maximum of %d levels. For more information, see Requirements and constraints for parameter names in the Amazon Web Services Systems Manager User Guide.", MaxHierarchyLevels)
	}
	return name, nil
}

type ssmTag struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

// checkSSMTags applies the Tag shape's constraints (SSM API Reference: Tag): keys of 1 to 128 characters,
// values of 0 to 256, letters, digits, spaces and _.:/=+-@ only, keys not starting with aws:.
func checkSSMTags(tags []ssmTag) *apiError {
	for _, t := range tags {
		switch {
		case len([]rune(t.Key)) < 1 || len([]rune(t.Key)) > 128 || !ssmTagRE.MatchString(t.Key):
			return ssmErr("ValidationException", "1 validation error detected: Value '%s' at 'tags.member.key' failed to satisfy constraint: Member must have length between 1 and 128 and satisfy regular expression pattern: ^(?!^(?i)aws:)(?=^[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*$).*$", t.Key)
		case strings.HasPrefix(strings.ToLower(t.Key), "aws:"):
			return ssmErr("ValidationException", "1 validation error detected: Value '%s' at 'tags.member.key' failed to satisfy constraint: Member must satisfy regular expression pattern: ^(?!^(?i)aws:)(?=^[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*$).*$", t.Key)
		case len([]rune(t.Value)) > 256 || !ssmTagRE.MatchString(t.Value):
			return ssmErr("ValidationException", "1 validation error detected: Value '%s' at 'tags.member.value' failed to satisfy constraint: Member must have length less than or equal to 256 and satisfy regular expression pattern: ^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)$", t.Value)
		}
	}
	return nil
}

// putParameter creates or overwrites a parameter (SSM API Reference: PutParameter).
func (s *Server) putParameter(rg *region, body []byte) (any, *apiError) {
	var in struct {
		Name, Value, Type, Tier, DataType, Description, KeyId, AllowedPattern, Policies string
		Overwrite                                                                       bool
		Tags                                                                            []ssmTag
	}
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	name, e := s.checkName(rg, in.Name, false)
	if e != nil {
		return nil, e
	}
	switch {
	case in.Value == "":
		return nil, ssmErr("ValidationException", "1 validation error detected: Value at 'value' failed to satisfy constraint: Member must have length greater than or equal to 1")
	case strings.Contains(in.Value, "{{") && strings.Contains(in.Value, "}}"):
		return nil, ssmErr("ValidationException", "Parameter value can't nest another parameter. Do not use \"{{}}\" in the value.")
	case in.Type != "" && in.Type != "String" && in.Type != "StringList" && in.Type != "SecureString":
		return nil, ssmErr("ValidationException", "1 validation error detected: Value '%s' at 'type' failed to satisfy constraint: Member must satisfy enum value set: [SecureString, StringList, String]", in.Type)
	case in.Tier != "" && in.Tier != "Standard" && in.Tier != "Advanced" && in.Tier != "Intelligent-Tiering":
		return nil, ssmErr("ValidationException", "1 validation error detected: Value '%s' at 'tier' failed to satisfy constraint: Member must satisfy enum value set: [Advanced, Intelligent-Tiering, Standard]", in.Tier)
	case in.DataType != "" && in.DataType != "text" && in.DataType != "aws:ec2:image" && in.DataType != "aws:ssm:integration":
		return nil, ssmErr("ValidationException", "The following data type is not supported: %s (Data type names are all lowercase.)", in.DataType)
	case in.Policies != "":
		return nil, ssmErr("NotImplemented", "ec2fake does not model parameter policies")
	}
	old := rg.params[name]
	if old != nil && !in.Overwrite {
		return nil, ssmErr("ParameterAlreadyExists", "The parameter already exists. To overwrite this value, set the overwrite option in the request to true.")
	}
	if in.Overwrite && len(in.Tags) > 0 {
		return nil, ssmErr("ValidationException", "Invalid request: tags and overwrite can't be used together. To create a parameter with tags, please remove overwrite flag. To update tags for an existing parameter, please use AddTagsToResource or RemoveTagsFromResource.")
	}
	typ := in.Type
	switch {
	case old == nil && typ == "":
		return nil, ssmErr("ValidationException", "A parameter type is required when you create a parameter.")
	case old != nil && typ == "":
		typ = old.Type
	case old != nil && typ != old.Type:
		return nil, ssmErr("HierarchyTypeMismatchException", "The parameter type can't be changed: %s is a %s.", name, old.Type)
	}
	if e := checkSSMTags(in.Tags); e != nil {
		return nil, e
	}
	if len(in.Tags) > MaxSSMTags {
		return nil, ssmErr("TooManyTagsError", "The Tags parameter has exceeded the maximum number of %d tags.", MaxSSMTags)
	}
	tier, e := s.tierOf(rg, in.Tier, old, len(in.Value))
	if e != nil {
		return nil, e
	}
	if in.AllowedPattern != "" {
		re, err := regexp.Compile(in.AllowedPattern)
		if err != nil {
			return nil, ssmErr("InvalidAllowedPatternException", "The request does not meet the regular expression requirement: %v", err)
		}
		if !re.MatchString(in.Value) {
			return nil, ssmErr("ParameterPatternMismatchException", "Parameter value, cannot be validated against allowedPattern: %s", in.AllowedPattern)
		}
	}
	dataType := in.DataType
	if dataType == "" {
		dataType = "text"
	}
	keyID := ""
	if in.KeyId != "" && !kmsKeyIDRE.MatchString(in.KeyId) {
		return nil, ssmErr("InvalidKeyId", "The query key ID isn't valid.")
	}
	if typ == "SecureString" {
		keyID = in.KeyId
		if keyID == "" {
			keyID = DefaultParameterKey
		}
	}
	p := &parameter{Parameter: Parameter{
		Name: name, Type: typ, Value: in.Value, Tier: tier, DataType: dataType, Description: in.Description,
		KeyID: keyID, AllowedPattern: in.AllowedPattern, Version: 1, LastModified: s.now(),
	}}
	if old != nil {
		p.Version = old.Version + 1
		p.Tags = old.Tags
		p.history = append(old.history, old.Parameter)
		// Parameter Store keeps the 100 most recent versions (PutParameter; ParameterMaxVersionLimitExceeded
		// only when the oldest carries a label, which the fake does not model).
		if len(p.history) >= MaxParameterVersions {
			p.history = p.history[len(p.history)-MaxParameterVersions+1:]
		}
	} else {
		for _, t := range in.Tags {
			p.Tags = mergeTags(p.Tags, map[string]string{t.Key: t.Value})
		}
	}
	rg.params[name] = p
	return map[string]any{"Version": p.Version, "Tier": tier}, nil
}

// tierOf picks the tier a write lands in (SSM API Reference: PutParameter, Tier): the one asked, or with
// none the parameter's (Standard for a new one); Intelligent-Tiering is Standard while the value fits. An
// Advanced parameter cannot go back to Standard; a Standard value holds 4096 bytes, an Advanced one 8192;
// the region holds at most MaxStandardParameters standard ones.
func (s *Server) tierOf(rg *region, asked string, old *parameter, size int) (string, *apiError) {
	tier := asked
	switch {
	case asked == "" && old != nil:
		tier = old.Tier
	case asked == "":
		tier = "Standard"
	case asked == "Intelligent-Tiering":
		tier = "Standard"
		if size > MaxStandardValueLen || (old != nil && old.Tier == "Advanced") {
			tier = "Advanced"
		}
	}
	if old != nil && old.Tier == "Advanced" && tier == "Standard" {
		return "", ssmErr("ValidationException", "This parameter uses the advanced-parameter tier. You can't downgrade a parameter from the advanced-parameter tier to the standard-parameter tier. If necessary, you can delete the advanced parameter and recreate it as a standard parameter.")
	}
	if tier == "Standard" && size > MaxStandardValueLen {
		return "", ssmErr("ValidationException", "Standard tier parameters support a maximum parameter value of %d characters. To create a larger parameter value, upgrade the parameter to use the advanced-parameter tier. For more information, see https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-advanced-parameters.html", MaxStandardValueLen)
	}
	if tier == "Advanced" && size > MaxAdvancedValueLen {
		return "", ssmErr("ValidationException", "Advanced tier parameters support a maximum parameter value of %d characters.", MaxAdvancedValueLen)
	}
	if tier == "Standard" && old == nil {
		n := 0
		for _, p := range rg.params {
			if !p.public && p.Tier == "Standard" {
				n++
			}
		}
		if n >= s.opts.MaxStandardParameters {
			return "", ssmErr("ParameterLimitExceeded", "You have exceeded the number of parameters for this AWS account. Delete one or more parameters and try again.")
		}
	}
	return tier, nil
}

// ssmParam is a parameter as GetParameter* answer it.
type ssmParam struct {
	Name             string  `json:"Name"`
	Type             string  `json:"Type"`
	Value            string  `json:"Value"`
	Version          int64   `json:"Version"`
	Selector         string  `json:"Selector,omitempty"`
	LastModifiedDate float64 `json:"LastModifiedDate"`
	ARN              string  `json:"ARN"`
	DataType         string  `json:"DataType"`
}

// view is how a parameter version reads: a SecureString without WithDecryption is its ciphertext, an opaque
// base64 string (SSM API Reference: GetParameter, WithDecryption: "Return decrypted values for secure
// string parameters. This flag is ignored for String and StringList parameter types.").
func (s *Server) view(rg *region, p Parameter, decrypt bool, selector string) ssmParam {
	v := p.Value
	if p.Type == "SecureString" && !decrypt {
		v = ciphertext(p)
	}
	return ssmParam{
		Name: p.Name, Type: p.Type, Value: v, Version: p.Version, Selector: selector, ARN: s.paramArn(rg, p.Name), DataType: p.DataType,
		LastModifiedDate: float64(p.LastModified.UnixMilli()) / 1000,
	}
}

// ciphertext stands for KMS's encryption of a SecureString: opaque, stable per version, and not the value.
func ciphertext(p Parameter) string {
	sum := sha256.Sum256([]byte(p.KeyID + "\x00" + p.Name + "\x00" + strconv.FormatInt(p.Version, 10) + "\x00" + p.Value))
	return base64.StdEncoding.EncodeToString(append([]byte("ec2fake-kms:"+p.KeyID+":"), []byte(hex.EncodeToString(sum[:]))...))
}

// lookup finds a parameter by name, ARN, or name:version.
func (s *Server) lookup(rg *region, ref string) (Parameter, string, *apiError) {
	if rest, ok := strings.CutPrefix(ref, s.paramArnPrefix(rg)); ok {
		ref = rest
		if _, held := rg.params[ref]; !held {
			ref = strings.TrimPrefix(ref, "/")
		}
	}
	name, selector := ref, ""
	if i := strings.LastIndexByte(ref, ':'); i >= 0 {
		name, selector = ref[:i], ref[i:]
	}
	name, e := s.checkName(rg, name, true)
	if e != nil {
		return Parameter{}, "", e
	}
	p := rg.params[name]
	if p == nil {
		return Parameter{}, "", ssmErr("ParameterNotFound", "Parameter %s not found.", name)
	}
	if selector == "" {
		return p.Parameter, "", nil
	}
	version, err := strconv.ParseInt(selector[1:], 10, 64)
	if err != nil {
		return Parameter{}, "", ssmErr("NotImplemented", "ec2fake does not model parameter labels (%s)", selector)
	}
	if version == p.Version {
		return p.Parameter, selector, nil
	}
	for _, h := range p.history {
		if h.Version == version {
			return h, selector, nil
		}
	}
	return Parameter{}, "", ssmErr("ParameterVersionNotFound", "Systems Manager could not find version %d of %s. Verify the version and try again.", version, name)
}

// getParameter reads one parameter (SSM API Reference: GetParameter).
func (s *Server) getParameter(rg *region, body []byte) (any, *apiError) {
	var in struct {
		Name           string
		WithDecryption bool
	}
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	p, selector, e := s.lookup(rg, in.Name)
	if e != nil {
		return nil, e
	}
	return map[string]any{"Parameter": s.view(rg, p, in.WithDecryption, selector)}, nil
}

// getParameters reads up to 10 parameters (SSM API Reference: GetParameters); those it cannot find are
// listed in InvalidParameters, not an error.
func (s *Server) getParameters(rg *region, body []byte) (any, *apiError) {
	var in struct {
		Names          []string
		WithDecryption bool
	}
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	if e := checkNamesCount(in.Names); e != nil {
		return nil, e
	}
	params, invalid := []ssmParam{}, []string{}
	for _, ref := range in.Names {
		p, selector, e := s.lookup(rg, ref)
		switch {
		case e == nil:
			params = append(params, s.view(rg, p, in.WithDecryption, selector))
		case e.code == "ParameterNotFound" || e.code == "ParameterVersionNotFound":
			invalid = append(invalid, ref)
		default:
			return nil, e
		}
	}
	return map[string]any{"Parameters": params, "InvalidParameters": invalid}, nil
}

func checkNamesCount(names []string) *apiError {
	if len(names) < 1 || len(names) > 10 {
		return ssmErr("ValidationException", "1 validation error detected: Value '%v' at 'names' failed to satisfy constraint: Member must have length less than or equal to 10 and greater than or equal to 1", names)
	}
	return nil
}

// deleteParameters deletes up to 10 parameters (SSM API Reference: DeleteParameters); those it cannot
// find are listed in InvalidParameters.
func (s *Server) deleteParameters(rg *region, body []byte) (any, *apiError) {
	var in struct{ Names []string }
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	if e := checkNamesCount(in.Names); e != nil {
		return nil, e
	}
	deleted, invalid := []string{}, []string{}
	for _, ref := range in.Names {
		name, e := s.checkName(rg, ref, false)
		if e != nil {
			return nil, e
		}
		if p := rg.params[name]; p != nil && !p.public {
			delete(rg.params, name)
			deleted = append(deleted, name)
		} else {
			invalid = append(invalid, ref)
		}
	}
	return map[string]any{"DeletedParameters": deleted, "InvalidParameters": invalid}, nil
}

// taggedParameter resolves AddTagsToResource's and ListTagsForResource's resource: only parameters are
// modelled; one that does not exist is InvalidResourceId.
func (s *Server) taggedParameter(rg *region, resourceType, id string) (*parameter, *apiError) {
	if resourceType != "Parameter" {
		return nil, ssmErr("NotImplemented", "ec2fake does not model tags on %s resources", resourceType)
	}
	if rest, ok := strings.CutPrefix(id, s.paramArnPrefix(rg)); ok {
		id = rest
	}
	p := rg.params[id]
	if p == nil {
		p = rg.params["/"+strings.TrimPrefix(id, "/")]
	}
	if p == nil || p.public {
		return nil, ssmErr("InvalidResourceId", "The resource ID \"%s\" is not valid. Verify the ID and try again.", id)
	}
	return p, nil
}

// addTagsToResource adds or overwrites a parameter's tags (SSM API Reference: AddTagsToResource), at most 50.
func (s *Server) addTagsToResource(rg *region, body []byte) (any, *apiError) {
	var in struct {
		ResourceType, ResourceId string
		Tags                     []ssmTag
	}
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	p, e := s.taggedParameter(rg, in.ResourceType, in.ResourceId)
	if e != nil {
		return nil, e
	}
	if len(in.Tags) == 0 {
		return nil, ssmErr("ValidationException", "1 validation error detected: Value null at 'tags' failed to satisfy constraint: Member must not be null")
	}
	if e := checkSSMTags(in.Tags); e != nil {
		return nil, e
	}
	merged := copyTags(p.Tags)
	for _, t := range in.Tags {
		merged = mergeTags(merged, map[string]string{t.Key: t.Value})
	}
	if len(merged) > MaxSSMTags {
		return nil, ssmErr("TooManyTagsError", "The Tags parameter has exceeded the maximum number of %d tags.", MaxSSMTags)
	}
	p.Tags = merged
	return map[string]any{}, nil
}

// listTagsForResource lists a parameter's tags (SSM API Reference: ListTagsForResource).
func (s *Server) listTagsForResource(rg *region, body []byte) (any, *apiError) {
	var in struct{ ResourceType, ResourceId string }
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	p, e := s.taggedParameter(rg, in.ResourceType, in.ResourceId)
	if e != nil {
		return nil, e
	}
	list := []ssmTag{}
	for _, k := range sortedKeys(p.Tags) {
		list = append(list, ssmTag{k, p.Tags[k]})
	}
	return map[string]any{"TagList": list}, nil
}

// getParametersByPath lists the parameters under a path (SSM API Reference: GetParametersByPath): one level
// down, or every level with Recursive; pages of MaxResults, 1 to 10 (10 without it), NextToken to go on.
func (s *Server) getParametersByPath(rg *region, body []byte) (any, *apiError) {
	var in struct {
		Path             string
		Recursive        bool
		WithDecryption   bool
		MaxResults       *int
		NextToken        string
		ParameterFilters []json.RawMessage
	}
	if e := decode(body, &in); e != nil {
		return nil, e
	}
	if len(in.ParameterFilters) > 0 {
		return nil, ssmErr("NotImplemented", "ec2fake does not model GetParametersByPath ParameterFilters")
	}
	path := in.Path
	if !strings.HasPrefix(path, "/") || (path != "/" && !paramNameRE.MatchString(path)) {
		return nil, ssmErr("ValidationException", "The parameter doesn't meet the parameter name requirements. The parameter name must begin with a forward slash \"/\". It can't be prefixed with \"aws\" or \"ssm\" (case-insensitive). It must use only letters, numbers, or the following symbols: . (period), - (hyphen), _ (underscore). Special characters are not allowed. All sub-paths, if specified, must use the forward slash symbol \"/\". Valid example: /get/parameters2-/by1./path0_.")
	}
	size := 10
	if in.MaxResults != nil {
		switch n := *in.MaxResults; {
		case n < 1:
			return nil, ssmErr("ValidationException", "1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value greater than or equal to 1", n)
		case n > 10:
			return nil, ssmErr("ValidationException", "1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 10", n)
		}
		size = *in.MaxResults
	}
	prefix := strings.TrimSuffix(path, "/") + "/"
	var names []string
	for name, p := range rg.params {
		rest, under := strings.CutPrefix(name, prefix)
		if !under || (p.public && !strings.HasPrefix(path, "/aws/")) {
			continue
		}
		if in.Recursive || !strings.Contains(rest, "/") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	start := 0
	if in.NextToken != "" {
		n, ok := decodeToken("GetParametersByPath"+path, in.NextToken)
		if !ok || n > len(names) {
			return nil, ssmErr("InvalidNextToken", "The specified token isn't valid.")
		}
		start = n
	}
	end := min(start+size, len(names))
	out := map[string]any{}
	params := []ssmParam{}
	for _, name := range names[start:end] {
		params = append(params, s.view(rg, rg.params[name].Parameter, in.WithDecryption, ""))
	}
	out["Parameters"] = params
	if end < len(names) {
		out["NextToken"] = encodeToken("GetParametersByPath"+path, end)
	}
	return out, nil
}

// Parameter returns a parameter as stored, its Value in plain text.
func (s *Server) Parameter(region, name string) (Parameter, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.mustRegion(region).params[name]
	if p == nil {
		return Parameter{}, false
	}
	out := p.Parameter
	out.Tags = copyTags(p.Tags)
	return out, true
}

// Parameters lists a region's parameters (AWS's public ones left out), sorted by name.
func (s *Server) Parameters(region string) []Parameter {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	var out []Parameter
	for _, name := range sortedKeys(rg.params) {
		if p := rg.params[name]; !p.public {
			q := p.Parameter
			q.Tags = copyTags(p.Tags)
			out = append(out, q)
		}
	}
	return out
}

// SetParameter writes a parameter as someone else would (the guest with its instance role writing
// /applied): a new version, its tags kept; Type, when empty, is the current one or String.
func (s *Server) SetParameter(region, name, typ, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.mustRegion(region)
	old := rg.params[name]
	p := &parameter{Parameter: Parameter{Name: name, Type: typ, Value: value, Tier: "Standard", DataType: "text", Version: 1, LastModified: s.now()}}
	if old != nil {
		p.Version, p.Tags, p.Tier, p.KeyID = old.Version+1, old.Tags, old.Tier, old.KeyID
		p.history = append(old.history, old.Parameter)
		if typ == "" {
			p.Type = old.Type
		}
	}
	if p.Type == "" {
		p.Type = "String"
	}
	if p.Type == "SecureString" && p.KeyID == "" {
		p.KeyID = DefaultParameterKey
	}
	if len(value) > MaxStandardValueLen {
		p.Tier = "Advanced"
	}
	rg.params[name] = p
}
