package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// bcryptHash matches any htpasswd bcrypt hash: the backend makes the proxy's from the password, so a test
// cannot know it, but can find one wherever it turns up.
var bcryptHash = regexp.MustCompile(`\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}`)

// secretScan looks for the secrets a test made, and for any bcrypt hash, in what a reader without secret
// access sees: the state, the plan's values, the TRACE log, a backend's readable objects. A test may add to
// secrets as it goes (the hashes the backend wrote, read back from a fake): the methods take the scan by
// pointer, so a plan check made before the first step looks for what the steps before it recorded.
type secretScan struct{ secrets []string }

// find names the first secret or hash text holds, as an error about where.
func (s *secretScan) find(where, text string) error {
	for _, secret := range s.secrets {
		if strings.Contains(text, secret) {
			return fmt.Errorf("%s holds a secret: %.12q...", where, secret)
		}
	}
	if h := bcryptHash.FindString(text); h != "" {
		return fmt.Errorf("%s holds a bcrypt hash: %.12q...", where, h)
	}
	return nil
}

// inState checks every attribute of every resource in the state.
func (s *secretScan) inState(st *terraform.State) error {
	for name, rs := range st.RootModule().Resources {
		for key, value := range rs.Primary.Attributes {
			if err := s.find(fmt.Sprintf("state of %s, attribute %s", name, key), value); err != nil {
				return err
			}
		}
	}
	return nil
}

// inPlan checks what the plan records of values. Its configuration section is left out: it echoes the
// source, where the tests write the secrets as literals (a user would pass an ephemeral variable).
func (s *secretScan) inPlan() plancheck.PlanCheck {
	return planCheckFunc(func(_ context.Context, req plancheck.CheckPlanRequest, _ *plancheck.CheckPlanResponse) error {
		values := *req.Plan
		values.Config = nil
		plan, err := json.Marshal(values)
		if err != nil {
			return err
		}
		return s.find("the plan", string(plan))
	})
}

// inTraceLog checks the TRACE log traceLogTo started, less the harness's echoes of each step's configuration.
// The log must hold each of mustHold (the provider's own RPC lines, the proxy's id), or the search would
// prove nothing.
func (s *secretScan) inTraceLog(t *testing.T, logFile string, mustHold ...string) {
	t.Helper()
	trace, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("reading the trace log: %v", err)
	}
	logged := withoutConfigEchoes(string(trace))
	for _, want := range append([]string{"ApplyResourceChange"}, mustHold...) {
		if !strings.Contains(logged, want) {
			t.Fatalf("the trace log lacks %q: the search for secrets would prove nothing", want)
		}
	}
	if err := s.find("the TRACE log "+logFile, logged); err != nil {
		t.Error(err)
	}
}

// traceLogTo sends every CLI and provider log line of the test, at TRACE, to a file of its own.
func traceLogTo(t *testing.T) string {
	logFile := filepath.Join(t.TempDir(), "trace.log")
	t.Setenv("TF_ACC_LOG_PATH", logFile)
	t.Setenv("TF_LOG", "TRACE")
	return logFile
}

// keyBodyLines are the base64 lines of a PEM key: found wherever the key is, whatever escapes the newlines
// between them (JSON, a log line).
func keyBodyLines(t *testing.T, keyPEM string) []string {
	t.Helper()
	var body []string
	for _, line := range strings.Split(strings.TrimSpace(keyPEM), "\n") {
		if !strings.HasPrefix(line, "-----") {
			body = append(body, line)
		}
	}
	if len(body) == 0 {
		t.Fatalf("not a PEM key: %.20q", keyPEM)
	}
	return body
}
