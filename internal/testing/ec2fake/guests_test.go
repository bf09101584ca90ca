package ec2fake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// guestProxy is the proxy the guest tests configure.
const guestProxy = "web"

// playRound plays one round of the agents through the loop PlayGuests runs: the loop takes the tick, and
// stop returns only once the round it started has ended.
func playRound(s *Server) {
	ticks := make(chan time.Time)
	stop := s.playGuests(ticks)
	ticks <- time.Time{}
	stop()
}

// writeConfig writes value to guestProxy's config parameter, as the backend does.
func (h *harness) writeConfig(value string) {
	h.t.Helper()
	_, err := h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(guest.ParameterPath(guestProxy, guest.ParameterConfig)),
		Value: aws.String(value), Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)})
	h.ok("PutParameter config", err)
}

// guestKey is the config key the guest tests' secrets parameter holds (writeSecrets).
var guestKey = bytes.Repeat([]byte{7}, guest.ConfigKeyBytes)

// writeSecrets writes guestProxy's secrets parameter with guestKey, as the backend does.
func (h *harness) writeSecrets() {
	h.t.Helper()
	b, err := json.Marshal(guest.Secrets{ConfigKey: base64.StdEncoding.EncodeToString(guestKey)})
	if err != nil {
		h.t.Fatal(err)
	}
	_, err = h.ssm.PutParameter(h.ctx, &ssm.PutParameterInput{Name: aws.String(guest.ParameterPath(guestProxy, guest.ParameterSecrets)),
		Value: aws.String(string(b)), Type: ssmtypes.ParameterTypeSecureString, Overwrite: aws.Bool(true)})
	h.ok("PutParameter secrets", err)
}

// configOf is a config parameter's value that names id, authenticated with guestKey.
func configOf(t *testing.T, id string) string {
	t.Helper()
	return signedConfigOf(t, id, guestKey)
}

// signedConfigOf is a config parameter's value that names id, authenticated with key.
func signedConfigOf(t *testing.T, id string, key []byte) string {
	t.Helper()
	c := guest.Config{ConfigID: id, SquidConf: "http_port 3128\n"}
	c.MAC = guest.ConfigMAC(key, guest.ParameterPath(guestProxy, ""), c)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withName tags the instance a RunInstancesInput launches with that Name.
func withName(name string) func(*ec2.RunInstancesInput) {
	return func(in *ec2.RunInstancesInput) {
		in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags(nameTag, name)}}
	}
}

// applied is guestProxy's applied parameter: its value, "" when there is none, and its version.
func (h *harness) applied() (string, int64) {
	p, ok := h.s.Parameter(h.region, guest.ParameterPath(guestProxy, guest.ParameterApplied))
	if !ok {
		return "", 0
	}
	return p.Value, p.Version
}

// Only the agent of a running instance of the proxy reports the configuration applied.
func TestPlayGuestsReportsOnlyFromRunningInstances(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		// instance starts the instances, if any; config is the config parameter's value, a config of
		// "cfg-1" when empty.
		instance func(h *harness)
		config   string
		want     string
	}{
		"running":                    {instance: func(h *harness) { h.running(withName(guestProxy)) }, want: "cfg-1"},
		"running, one of two":        {instance: func(h *harness) { h.running(withName(guestProxy)); h.running(withName(guestProxy)) }, want: "cfg-1"},
		"pending":                    {instance: func(h *harness) { h.s.StickNextLaunchInPending(1); h.mustLaunch(withName(guestProxy)) }},
		"stopped":                    {instance: func(h *harness) { h.s.SetInstanceState(h.region, h.running(withName(guestProxy)), StateStopped) }},
		"stopping":                   {instance: func(h *harness) { h.s.SetInstanceState(h.region, h.running(withName(guestProxy)), StateStopping) }},
		"shutting down":              {instance: func(h *harness) { h.s.SetInstanceState(h.region, h.running(withName(guestProxy)), StateShuttingDown) }},
		"terminated":                 {instance: func(h *harness) { h.s.SetInstanceState(h.region, h.running(withName(guestProxy)), StateTerminated) }},
		"no instance":                {instance: func(*harness) {}},
		"another proxy's instance":   {instance: func(h *harness) { h.running(withName("db")) }},
		"config that is no JSON":     {instance: func(h *harness) { h.running(withName(guestProxy)) }, config: "not json"},
		"config without a config id": {instance: func(h *harness) { h.running(withName(guestProxy)) }, config: `{"squid_conf":"x"}`},
		"region unreachable":         {instance: func(h *harness) { h.running(withName(guestProxy)); h.s.SetReachable(h.region, false) }},
		// The agent installs only a config the provider's key authenticates (issue 35).
		"config under another key": {instance: func(h *harness) { h.running(withName(guestProxy)) },
			config: signedConfigOf(t, "cfg-1", bytes.Repeat([]byte{8}, guest.ConfigKeyBytes))},
		"config without a MAC": {instance: func(h *harness) { h.running(withName(guestProxy)) }, config: `{"config_id":"cfg-1","squid_conf":"x"}`},
		"no secrets parameter": {instance: func(h *harness) {
			h.running(withName(guestProxy))
			_, err := h.ssm.DeleteParameters(h.ctx, &ssm.DeleteParametersInput{Names: []string{guest.ParameterPath(guestProxy, guest.ParameterSecrets)}})
			h.ok("DeleteParameters", err)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			config := tc.config
			if config == "" {
				config = configOf(t, "cfg-1")
			}
			h.writeSecrets()
			h.writeConfig(config)
			tc.instance(h)
			playRound(h.s)
			if got, _ := h.applied(); got != tc.want {
				t.Errorf("applied = %q, want %q", got, tc.want)
			}
		})
	}
}

// The agent follows the config parameter while its instance runs, and no more while it is stopped; its
// writes are no requests of the fake's clients.
func TestPlayGuestsFollowsConfigWhileRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	id := h.running(withName(guestProxy))
	h.writeSecrets()
	steps := []struct {
		name        string
		act         func()
		want        string
		wantVersion int64
	}{
		{"first config", func() { h.writeConfig(configOf(t, "cfg-1")) }, "cfg-1", 1},
		{"no change: no new version", func() {}, "cfg-1", 1},
		{"same config id rewritten", func() { h.writeConfig(configOf(t, "cfg-1")) }, "cfg-1", 1},
		{"new config", func() { h.writeConfig(configOf(t, "cfg-2")) }, "cfg-2", 2},
		{"stopped, then a new config", func() {
			h.s.SetInstanceState(h.region, id, StateStopped)
			h.writeConfig(configOf(t, "cfg-3"))
		}, "cfg-2", 2},
		{"running again", func() { h.s.SetInstanceState(h.region, id, StateRunning) }, "cfg-3", 3},
	}
	for _, step := range steps {
		step.act()
		playRound(h.s)
		if got, version := h.applied(); got != step.want || version != step.wantVersion {
			t.Fatalf("%s: applied = %q version %d, want %q version %d", step.name, got, version, step.want, step.wantVersion)
		}
	}
	if p, _ := h.s.Parameter(h.region, guest.ParameterPath(guestProxy, guest.ParameterApplied)); p.Type != "String" {
		t.Errorf("applied is a %s, want a String", p.Type)
	}
	if got := h.s.Count("PutParameter"); got != 5 {
		t.Errorf("%d PutParameter requests logged, want the test's own 5 (four configs, the secrets): the agent's writes are no requests", got)
	}
	// PlayGuests' stop may be called more than once: a caller's own and the test's cleanup.
	stop := h.s.PlayGuests()
	stop()
	stop()
}

func TestRunsInstanceNamed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	id := h.running(withName(guestProxy))
	if !h.s.RunsInstanceNamed(h.region, guestProxy) || h.s.RunsInstanceNamed(h.region, "db") {
		t.Fatalf("RunsInstanceNamed: want true for %s, false for db", guestProxy)
	}
	h.s.SetInstanceState(h.region, id, StateStopped)
	if h.s.RunsInstanceNamed(h.region, guestProxy) {
		t.Fatalf("RunsInstanceNamed(%s) with its instance stopped = true", guestProxy)
	}
}
