package ec2fake

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The fake's wire tables against the SDK the backend builds with: what its serializers can send and what
// its deserializers read. A fake that wrote an element the SDK does not read would silently lose it.

// moduleFile reads a file of a module of the build list from the module cache.
func moduleFile(t *testing.T, module, name string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestActionParametersMatchSDK(t *testing.T) {
	t.Parallel()
	src := moduleFile(t, "github.com/aws/aws-sdk-go-v2/service/ec2", "serializers.go")
	keyRE := regexp.MustCompile(`(?:Flat)?Key\("([A-Za-z0-9]+)"\)`)
	for action := range ec2Actions {
		start := strings.Index(src, "func awsEc2query_serializeOpDocument"+action+"Input(")
		if start < 0 {
			t.Errorf("%s: the SDK has no serializer for it", action)
			continue
		}
		body := src[start:]
		body = body[:strings.Index(body, "\n}\n")]
		var want []string
		for _, m := range keyRE.FindAllStringSubmatch(body, -1) {
			want = append(want, m[1])
		}
		if got := ec2Params[action]; !slices.Equal(got, want) {
			t.Errorf("%s: ec2Params %v, the SDK's serializer sends %v", action, got, want)
		}
	}
	if len(ec2Params) != len(ec2Actions) {
		t.Errorf("ec2Params has %d actions, ec2Actions %d", len(ec2Params), len(ec2Actions))
	}
	for action := range ssmActions {
		moduleFile(t, "github.com/aws/aws-sdk-go-v2/service/ssm", "api_op_"+action+".go")
	}
	for action := range stsActions {
		moduleFile(t, "github.com/aws/aws-sdk-go-v2/service/sts", "api_op_"+action+".go")
	}
}

func TestXMLElementsAreReadBySDK(t *testing.T) {
	t.Parallel()
	src := moduleFile(t, "github.com/aws/aws-sdk-go-v2/service/ec2", "deserializers.go")
	read := map[string]bool{}
	for _, m := range regexp.MustCompile(`EqualFold\("([A-Za-z0-9]+)", t\.Name\.Local\)`).FindAllStringSubmatch(src, -1) {
		read[m[1]] = true
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			tag := strings.Split(f.Tag.Get("xml"), ",")[0]
			if f.Anonymous && tag == "" {
				walk(f.Type, path)
				continue
			}
			for _, name := range strings.Split(tag, ">") {
				if name != "" && name != "-" && name != "item" && name != "requestId" && !read[name] {
					t.Errorf("%s.%s: the SDK reads no element %q", path, f.Name, name)
				}
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	for _, v := range []any{
		reservationXML{}, describeInstancesXML{}, terminateXML{}, returnXML{}, describeSubnetsXML{}, createGroupXML{},
		describeGroupsXML{}, authorizeXML{}, revokeXML{}, deleteGroupXML{}, allocateXML{}, associateXML{},
		describeAddressesXML{}, accountAttributesXML{},
	} {
		walk(reflect.TypeOf(v), reflect.TypeOf(v).Name())
	}
}
