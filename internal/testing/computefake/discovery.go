package computefake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The Compute discovery document (compute-api.json) describes every method, its path and query parameters
// with their types and patterns, and every request body's schema with field types, enum values and required
// fields. The fake checks each request against it before serving it, so that a request the real service
// would refuse for its shape is refused here too, whatever route it takes.
//
// The document is read from the google.golang.org/api module the project already builds against (its
// compute/v1 package ships it), located with `go list`, rather than copied into the tree: it is 6 MB, its
// version is then always the one the client was generated with, and no copy goes stale. `go test` puts the
// go command first on PATH, and the fake is only ever built into test binaries.

// discoveryPathEnv, when set, names the compute-api.json to read instead (a machine without the go command).
const discoveryPathEnv = "COMPUTEFAKE_DISCOVERY_JSON"

type discoveryDoc struct {
	Revision    string                    `json:"revision"`
	ServicePath string                    `json:"servicePath"`
	Parameters  map[string]*discParam     `json:"parameters"`
	Resources   map[string]*discResource  `json:"resources"`
	Schemas     map[string]*discSchema    `json:"schemas"`
	methods     []*discMethod             // every method, with its path split into segments
	patterns    map[string]*regexp.Regexp // compiled on first use
	mu          sync.Mutex
}

type discResource struct {
	Methods   map[string]*discMethod   `json:"methods"`
	Resources map[string]*discResource `json:"resources"`
}

type discMethod struct {
	ID         string                `json:"id"`
	HTTPMethod string                `json:"httpMethod"`
	Path       string                `json:"path"`
	FlatPath   string                `json:"flatPath"`
	Parameters map[string]*discParam `json:"parameters"`
	Request    *struct {
		Ref string `json:"$ref"`
	} `json:"request"`
	segments []string
}

type discParam struct {
	Type     string   `json:"type"`
	Format   string   `json:"format"`
	Location string   `json:"location"`
	Pattern  string   `json:"pattern"`
	Minimum  string   `json:"minimum"`
	Maximum  string   `json:"maximum"`
	Required bool     `json:"required"`
	Repeated bool     `json:"repeated"`
	Enum     []string `json:"enum"`
}

type discSchema struct {
	Ref                  string                 `json:"$ref"`
	Type                 string                 `json:"type"`
	Format               string                 `json:"format"`
	Pattern              string                 `json:"pattern"`
	Enum                 []string               `json:"enum"`
	Properties           map[string]*discSchema `json:"properties"`
	AdditionalProperties *discSchema            `json:"additionalProperties"`
	Items                *discSchema            `json:"items"`
	Annotations          *struct {
		Required []string `json:"required"`
	} `json:"annotations"`
}

var (
	discOnce sync.Once
	disc     *discoveryDoc
	errDisc  error
)

// discovery returns the parsed document, read once per process.
func discovery() (*discoveryDoc, error) {
	discOnce.Do(func() { disc, errDisc = readDiscovery() })
	return disc, errDisc
}

// DiscoveryRevision is the revision of the discovery document the fake checks requests against.
func DiscoveryRevision() (string, error) {
	d, err := discovery()
	if err != nil {
		return "", err
	}
	return d.Revision, nil
}

func readDiscovery() (*discoveryDoc, error) {
	file := os.Getenv(discoveryPathEnv)
	if file == "" {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "google.golang.org/api").Output()
		dir := strings.TrimSpace(string(out))
		if err != nil || dir == "" {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			if err == nil {
				err = errors.New("no directory")
			}
			return nil, fmt.Errorf("locating the google.golang.org/api module with go list (set %s to read compute-api.json from elsewhere): %w", discoveryPathEnv, err)
		}
		file = filepath.Join(dir, "compute", "v1", "compute-api.json")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the Compute discovery document: %w", err)
	}
	d := &discoveryDoc{patterns: map[string]*regexp.Regexp{}}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", file, err)
	}
	var walk func(map[string]*discResource)
	walk = func(rs map[string]*discResource) {
		for _, r := range rs {
			for _, m := range r.Methods {
				p := m.FlatPath
				if p == "" {
					p = m.Path
				}
				m.segments = strings.Split(p, "/")
				d.methods = append(d.methods, m)
			}
			walk(r.Resources)
		}
	}
	walk(d.Resources)
	// A stable order, so that the most literal match below wins the same way every run.
	sort.Slice(d.methods, func(i, j int) bool { return d.methods[i].ID < d.methods[j].ID })
	return d, nil
}

// apiError is an answer the fake gives instead of serving a request.
type apiError struct {
	status          int
	reason, message string
}

func (e *apiError) Error() string { return e.message }

func invalid(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid", fmt.Sprintf(format, args...)}
}

func (d *discoveryDoc) regexp(pattern string) *regexp.Regexp {
	d.mu.Lock()
	defer d.mu.Unlock()
	re, ok := d.patterns[pattern]
	if !ok {
		// A pattern the document holds but Go cannot compile matches everything: the check is then the
		// real service's alone, never a false refusal.
		re, _ = regexp.Compile("^(?:" + pattern + ")$")
		if re == nil {
			re = regexp.MustCompile(".*")
		}
		d.patterns[pattern] = re
	}
	return re
}

// match finds the method serving method and path (below the service path), and its path parameters. Where
// several templates match, the one with the most literal segments wins: "aggregated/instances" is not the
// zone "aggregated".
func (d *discoveryDoc) match(httpMethod, path string) (*discMethod, map[string]string) {
	segs := strings.Split(path, "/")
	var best *discMethod
	var bestParams map[string]string
	bestLiterals := -1
	for _, m := range d.methods {
		if m.HTTPMethod != httpMethod || len(m.segments) != len(segs) {
			continue
		}
		params, literals, ok := map[string]string{}, 0, true
		for i, s := range m.segments {
			switch {
			case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
				params[strings.TrimPrefix(strings.Trim(s, "{}"), "+")] = segs[i]
			case s == segs[i]:
				literals++
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		if ok && literals > bestLiterals {
			best, bestParams, bestLiterals = m, params, literals
		}
	}
	return best, bestParams
}

// check validates r (its body already read) against the document: the method exists, its path parameters
// match their patterns, every query parameter is one the method or the API takes and has a valid value,
// and the body fits the method's request schema. It returns the method, or the error the API answers with.
func (d *discoveryDoc) check(r *http.Request, body []byte) (*discMethod, *apiError) {
	rest := strings.TrimPrefix(r.URL.Path, "/"+d.ServicePath)
	m, params := d.match(r.Method, rest)
	if m == nil {
		return nil, &apiError{http.StatusNotFound, "notFound", fmt.Sprintf("The requested URL %s was not found on this server.", r.URL.Path)}
	}
	for name, p := range m.Parameters {
		if p.Location != "path" {
			continue
		}
		v, err := url.PathUnescape(params[name])
		if err != nil || (p.Pattern != "" && !d.regexp(p.Pattern).MatchString(v)) {
			return m, invalid("Invalid value for field '%s': '%s'. Must be a match of regex '%s'", name, v, p.Pattern)
		}
	}
	for name, values := range r.URL.Query() {
		p := m.Parameters[name]
		if p == nil {
			p = d.Parameters[name]
		}
		if p == nil || p.Location != "query" {
			return m, invalid("Invalid JSON payload received. Unknown name %q: Cannot bind query parameter. Field '%s' could not be found in request message.", name, name)
		}
		if len(values) > 1 && !p.Repeated {
			return m, invalid("Invalid value for field '%s': more than one value given.", name)
		}
		for _, v := range values {
			if err := checkScalar(p.Type, p.Format, p.Enum, p.Minimum, p.Maximum, v); err != "" {
				return m, invalid("Invalid value for field '%s': '%s'. %s", name, v, err)
			}
		}
	}
	for name, p := range m.Parameters {
		if p.Required && p.Location == "query" && !r.URL.Query().Has(name) {
			return m, &apiError{http.StatusBadRequest, "required", fmt.Sprintf("Required field '%s' not specified", name)}
		}
	}
	if m.Request == nil {
		return m, nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return m, &apiError{http.StatusBadRequest, "required", "Required field 'resource' not specified"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return m, invalid("Invalid JSON payload received. %v", err)
	}
	if e := d.checkValue(m.ID, "resource", &discSchema{Ref: m.Request.Ref}, v); e != nil {
		return m, e
	}
	return m, nil
}

// checkValue checks one JSON value against its schema, at field path at ("resource.networkInterfaces[0]").
func (d *discoveryDoc) checkValue(methodID, at string, s *discSchema, v any) *apiError {
	for s.Ref != "" {
		next, ok := d.Schemas[s.Ref]
		if !ok {
			return nil // a schema the document names but lacks: nothing to check against
		}
		s = next
	}
	if v == nil {
		return nil // JSON null: the field is unset
	}
	typeErr := func(protoType string) *apiError {
		b, _ := json.Marshal(v)
		return invalid("Invalid JSON payload received. Invalid value at '%s' (%s), %s", at, protoType, b)
	}
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return typeErr("TYPE_MESSAGE")
		}
		if s.Properties == nil && s.AdditionalProperties != nil {
			for _, k := range sortedKeys(obj) {
				if e := d.checkValue(methodID, at+"."+k, s.AdditionalProperties, obj[k]); e != nil {
					return e
				}
			}
			return nil
		}
		for _, k := range sortedKeys(obj) {
			ps, known := s.Properties[k]
			if !known {
				return invalid("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at)
			}
			if e := d.checkValue(methodID, at+"."+k, ps, obj[k]); e != nil {
				return e
			}
		}
		for _, k := range sortedKeys(s.Properties) {
			ps := s.Properties[k]
			if ps.Annotations == nil || !contains(ps.Annotations.Required, methodID) {
				continue
			}
			if _, set := obj[k]; !set {
				return &apiError{http.StatusBadRequest, "required", fmt.Sprintf("Required field '%s.%s' not specified", at, k)}
			}
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			return typeErr("TYPE_MESSAGE")
		}
		for i, item := range list {
			if e := d.checkValue(methodID, fmt.Sprintf("%s[%d]", at, i), s.Items, item); e != nil {
				return e
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return typeErr("TYPE_BOOL")
		}
	case "integer", "number":
		text := ""
		switch n := v.(type) {
		case json.Number:
			text = n.String()
		case string: // proto3 JSON takes numbers as strings too
			text = n
		default:
			return typeErr(protoNumberType(s.Format))
		}
		if e := checkScalar(s.Type, s.Format, nil, "", "", text); e != "" {
			return typeErr(protoNumberType(s.Format))
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			n, isNumber := v.(json.Number)
			// 64-bit integers are strings in the document's JSON, and numbers are accepted for them.
			if !isNumber || (s.Format != "int64" && s.Format != "uint64") {
				return typeErr("TYPE_STRING")
			}
			str = n.String()
		}
		if e := checkScalar("string", s.Format, s.Enum, "", "", str); e != "" {
			return invalid("Invalid value for field '%s': '%s'. %s", at, str, e)
		}
		if s.Pattern != "" && !d.regexp(s.Pattern).MatchString(str) {
			return invalid("Invalid value for field '%s': '%s'. Must be a match of regex '%s'", at, str, s.Pattern)
		}
	case "any", "":
	}
	return nil
}

func protoNumberType(format string) string {
	switch format {
	case "int32":
		return "TYPE_INT32"
	case "uint32":
		return "TYPE_UINT32"
	case "float":
		return "TYPE_FLOAT"
	}
	return "TYPE_DOUBLE"
}

// checkScalar checks a scalar given as text against its type, format, enum and bounds; it returns what is
// wrong, or "".
func checkScalar(typ, format string, enum []string, minimum, maximum, v string) string {
	if len(enum) > 0 && !contains(enum, v) {
		return "Must be one of [" + strings.Join(enum, ", ") + "]"
	}
	switch {
	case typ == "boolean":
		if v != "true" && v != "false" {
			return "Must be true or false."
		}
	case typ == "integer" || format == "int64" || format == "uint64":
		bits, unsigned := 64, format == "uint32" || format == "uint64"
		if format == "int32" || format == "uint32" {
			bits = 32
		}
		var n float64
		if unsigned {
			u, err := strconv.ParseUint(v, 10, bits)
			if err != nil {
				return "Must be an unsigned integer of " + strconv.Itoa(bits) + " bits."
			}
			n = float64(u)
		} else {
			i, err := strconv.ParseInt(v, 10, bits)
			if err != nil {
				return "Must be an integer of " + strconv.Itoa(bits) + " bits."
			}
			n = float64(i)
		}
		if lo, err := strconv.ParseFloat(minimum, 64); err == nil && n < lo {
			return "Must be at least " + minimum + "."
		}
		if hi, err := strconv.ParseFloat(maximum, 64); err == nil && n > hi {
			return "Must be at most " + maximum + "."
		}
	case typ == "number":
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return "Must be a number."
		}
	case format == "byte":
		if _, err := base64.StdEncoding.DecodeString(v); err != nil {
			if _, err := base64.URLEncoding.DecodeString(v); err != nil {
				return "Must be base64."
			}
		}
	}
	return ""
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
