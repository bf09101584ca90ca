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

// sdkReader is what the SDK's EC2 deserializers read (service/ec2/deserializers.go), per parent: for each
// deserializer function, the child elements it has a case for and, for each, the function that reads that
// child's own children ("" where it reads a value). An element is only read where its parent's function
// names it: groupId is read inside a securityGroup and a reservation's groupSet item, not everywhere.
type sdkReader map[string]map[string]string

var (
	deserializerRE = regexp.MustCompile(`(?m)^func (awsEc2query_deserialize(?:Op)?Document\w+)\(`)
	caseRE         = regexp.MustCompile(`case strings\.EqualFold\("([A-Za-z0-9]+)", t\.Name\.Local\):`)
	childCallRE    = regexp.MustCompile(`(awsEc2query_deserializeDocument\w+)\(`)
)

// noOutput stands for the reader of an action whose output the SDK has no members for (CreateTags,
// DeleteTags, DisassociateAddress, ReleaseAddress): it reads no element.
const noOutput = "(no output members)"

// unreadAnswers are the elements EC2 writes in an action's answer that the SDK has no field for, so that
// the fake writes them as EC2 does and no client loses anything: <return>true</return> (each action's
// example response in the EC2 API Reference).
var unreadAnswers = map[string][]string{
	"AssociateAddress":    {"return"},
	"CreateTags":          {"return"},
	"DeleteTags":          {"return"},
	"DisassociateAddress": {"return"},
	"ReleaseAddress":      {"return"},
}

func readSDKDeserializers(t *testing.T) sdkReader {
	t.Helper()
	src := moduleFile(t, "github.com/aws/aws-sdk-go-v2/service/ec2", "deserializers.go")
	r := sdkReader{noOutput: {}}
	funcs := deserializerRE.FindAllStringSubmatchIndex(src, -1)
	for i, m := range funcs {
		end := len(src)
		if i+1 < len(funcs) {
			end = funcs[i+1][0]
		}
		body := src[m[1]:end]
		cases := map[string]string{}
		found := caseRE.FindAllStringSubmatchIndex(body, -1)
		for j, c := range found {
			caseEnd := len(body)
			if j+1 < len(found) {
				caseEnd = found[j+1][0]
			}
			caseBody := body[c[1]:caseEnd]
			if k := strings.Index(caseBody, "default:"); k >= 0 {
				caseBody = caseBody[:k]
			}
			child := ""
			if call := childCallRE.FindStringSubmatch(caseBody); call != nil {
				child = call[1]
			}
			cases[body[c[2]:c[3]]] = child
		}
		r[src[m[2]:m[3]]] = cases
	}
	if len(r["awsEc2query_deserializeDocumentSecurityGroup"]) == 0 || r["awsEc2query_deserializeDocumentTagList"]["item"] != "awsEc2query_deserializeDocumentTag" {
		t.Fatal("the SDK's deserializers no longer read as this test expects: adapt readSDKDeserializers")
	}
	return r
}

// outputReader is the function that reads action's answer.
func (r sdkReader) outputReader(action string) string {
	if fn := "awsEc2query_deserializeOpDocument" + action + "Output"; r[fn] != nil {
		return fn
	}
	return noOutput
}

// ec2Answers are the types each served action answers with.
var ec2Answers = map[string]any{
	"RunInstances":                   reservationXML{},
	"DescribeInstances":              describeInstancesXML{},
	"TerminateInstances":             terminateXML{},
	"CreateTags":                     returnXML{},
	"DeleteTags":                     returnXML{},
	"DescribeSubnets":                describeSubnetsXML{},
	"CreateSecurityGroup":            createGroupXML{},
	"DescribeSecurityGroups":         describeGroupsXML{},
	"AuthorizeSecurityGroupIngress":  authorizeXML{},
	"RevokeSecurityGroupIngress":     revokeXML{},
	"AuthorizeSecurityGroupEgress":   authorizeXML{},
	"RevokeSecurityGroupEgress":      revokeXML{},
	"DeleteSecurityGroup":            deleteGroupXML{},
	"AllocateAddress":                allocateXML{},
	"AssociateAddress":               associateXML{},
	"DisassociateAddress":            returnXML{},
	"ReleaseAddress":                 returnXML{},
	"DescribeAddresses":              describeAddressesXML{},
	"DescribeAccountAttributes":      accountAttributesXML{},
	"CreateReplaceRootVolumeTask":    replaceRootXML{},
	"DescribeReplaceRootVolumeTasks": describeRootTasksXML{},
}

// Every element each answer type can hold is read by the SDK's function for its parent element (the
// answer's own elements by the action's output reader), and an element the SDK reads as a value holds no
// elements of the fake's, nor the other way round.
func TestXMLElementsAreReadBySDK(t *testing.T) {
	t.Parallel()
	r := readSDKDeserializers(t)
	for action := range ec2Actions {
		if _, ok := ec2Answers[action]; !ok {
			t.Errorf("%s: no answer type in ec2Answers", action)
		}
	}
	seen := map[[3]any]bool{}
	// walk checks the elements of ty, which the SDK reads with fn; root says ty is an answer of action.
	var walk func(ty reflect.Type, fn, path, action string, root bool)
	walk = func(ty reflect.Type, fn, path, action string, root bool) {
		key := [3]any{ty, fn, ""}
		if root {
			key[2] = action
		}
		if seen[key] {
			return
		}
		seen[key] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			tag := strings.Split(f.Tag.Get("xml"), ",")[0]
			if f.Anonymous && tag == "" {
				walk(f.Type, fn, path, action, root)
				continue
			}
			if tag == "-" || tag == "" {
				continue
			}
			if root && (tag == "requestId" || slices.Contains(unreadAnswers[action], tag)) {
				continue // requestId: the SDK takes the request id from the answer's header
			}
			at, where, read := fn, path, true
			for _, name := range strings.Split(tag, ">") {
				where += "." + name
				child, ok := r[at][name]
				if !ok {
					t.Errorf("%s (field %s): the SDK's %s reads no element %q", where, f.Name, at, name)
					read = false
					break
				}
				at = child
			}
			if !read {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() != reflect.Struct && at != "":
				t.Errorf("%s (field %s): the SDK reads elements in it (%s), the fake writes a value", where, f.Name, at)
			case ft.Kind() == reflect.Struct && ft.NumField() > 0 && at == "":
				t.Errorf("%s (field %s): the SDK reads it as a value, the fake writes elements in it", where, f.Name)
			case ft.Kind() == reflect.Struct:
				walk(ft, at, where, action, false)
			}
		}
	}
	for action, v := range ec2Answers {
		walk(reflect.TypeOf(v), r.outputReader(action), action, action, true)
	}
}
