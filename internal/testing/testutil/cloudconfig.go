package testutil

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// CloudConfig is the part of cloud-init's schema the proxies' user-data uses.
type CloudConfig struct {
	PackageUpdate  bool     `yaml:"package_update"`
	PackageUpgrade bool     `yaml:"package_upgrade"`
	Packages       []string `yaml:"packages"`
	WriteFiles     []struct {
		Path        string `yaml:"path"`
		Owner       string `yaml:"owner"`
		Permissions string `yaml:"permissions"`
		Encoding    string `yaml:"encoding"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	Runcmd [][]string `yaml:"runcmd"`
}

// ParseCloudConfig reads user-data as cloud-init does: a #cloud-config document of the keys CloudConfig knows
// and no other.
func ParseCloudConfig(t testing.TB, ud []byte) CloudConfig {
	t.Helper()
	if !strings.HasPrefix(string(ud), "#cloud-config\n") {
		t.Fatalf("user-data must start with #cloud-config: %.40q", ud)
	}
	var cc CloudConfig
	dec := yaml.NewDecoder(strings.NewReader(string(ud)))
	dec.KnownFields(true)
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("user-data is not the expected YAML: %v", err)
	}
	return cc
}
