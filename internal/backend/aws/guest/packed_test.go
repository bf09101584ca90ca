package guest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// packedConfig renders s and packs it: the whole config, its manifest and parts.
func packedConfig(t *testing.T, s proxyconf.Settings) (Config, Manifest, []string) {
	t.Helper()
	whole, _, _, err := RenderParameters(s, ParameterPath("p", ""), make([]byte, ConfigKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	if err := json.Unmarshal(whole, &c); err != nil {
		t.Fatal(err)
	}
	manifest, parts, err := PackConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	return c, m, parts
}

// manyDestinations is a proxy whose config takes several parts: names compression cannot shorten much.
func manyDestinations(n int) proxyconf.Settings {
	s := proxyconf.Settings{Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"}}
	for i := range n {
		s.AllowedDestinations = append(s.AllowedDestinations, fmt.Sprintf("h%x.%x.example.com", uint32(i)*2654435761, uint64(i+1)*11400714819323198485))
	}
	return s
}

// Packing round-trips in either format, each part fits a Standard parameter, the manifest is small, and
// LoadConfig refuses parts that are not the ones the manifest names: half of a write, a part changed or gone.
func TestPackConfig(t *testing.T) {
	t.Parallel()
	c, m, parts := packedConfig(t, manyDestinations(400))
	if m.Parts != len(parts) || m.Parts < 3 || m.Parts > MaxParts {
		t.Fatalf("%d parts (manifest: %d), want several within %d", len(parts), m.Parts, MaxParts)
	}
	for i, p := range parts {
		if len(p) > MaxPartChars || strings.Contains(p, "{{") {
			t.Errorf("part %d: %d characters", i+1, len(p))
		}
	}
	manifest, _ := json.Marshal(m)
	if len(manifest) > 300 {
		t.Errorf("the manifest is %d characters", len(manifest))
	}
	part := func(parts []string) func(int) (string, bool) {
		return func(i int) (string, bool) {
			if i > len(parts) {
				return "", false
			}
			return parts[i-1], true
		}
	}
	got, format, err := LoadConfig(string(manifest), part(parts))
	if err != nil || format != FormatParts || got != c {
		t.Fatalf("LoadConfig = format %d, %v; want the config packed", format, err)
	}
	whole, _ := json.Marshal(c)
	if got, format, err := LoadConfig(string(whole), part(nil)); err != nil || format != FormatWhole || got != c {
		t.Fatalf("LoadConfig of a whole config = format %d, %v", format, err)
	}
	_, _, other := packedConfig(t, manyDestinations(401))
	for name, bad := range map[string][]string{
		"a part of the next write": append(append([]string{}, parts[:1]...), other[1:len(parts)]...),
		"a part missing":           parts[:len(parts)-1],
		"a part changed":           append([]string{parts[0] + "A"}, parts[1:]...),
	} {
		if _, _, err := LoadConfig(string(manifest), part(bad)); !errors.Is(err, ErrPartsUnmatched) {
			t.Errorf("%s: LoadConfig = %v, want ErrPartsUnmatched", name, err)
		}
	}
}

// A forged set of parts whose SHA-256 the forger also wrote in the manifest is unpacked before its MAC can
// be checked: it must not unpack beyond MaxUnpackedBytes, in the agent as in Go.
func TestUnpackIsBounded(t *testing.T) {
	t.Parallel()
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	_, _ = zw.Write(bytes.Repeat([]byte(" "), MaxUnpackedBytes+1))
	_ = zw.Close()
	bomb := base64.StdEncoding.EncodeToString(z.Bytes())
	h := PackedHead{Parts: 1, SHA256: joinedSHA256([]string{bomb})}
	if _, err := Unpack(h, []string{bomb}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("Unpack of %d bytes packed in %d = %v, want refused", MaxUnpackedBytes+1, len(bomb), err)
	}
	out := python3(t, `d = json.load(sys.stdin)
try:
    agent.unpack(d["manifest"], d["parts"], d["limit"])
    print("unpacked")
except agent.AgentError as e:
    print("refused: %s" % e)`, map[string]any{"manifest": Manifest{ConfigID: "x", PackedHead: h, MAC: "m"}, "parts": []string{bomb}, "limit": MaxUnpackedBytes})
	if !strings.HasPrefix(string(out), "refused:") {
		t.Errorf("the agent's unpack of the bomb: %s", out)
	}
}

// The agent unpacks what PackConfig packs into the config LoadConfig reads, with the manifest's id and MAC,
// and answers None (read again later) for parts that do not match the manifest.
func TestAgentUnpacksAsLoadConfig(t *testing.T) {
	t.Parallel()
	c, m, parts := packedConfig(t, manyDestinations(400))
	_, _, other := packedConfig(t, manyDestinations(401))
	mixed := append(append([]string{}, parts[:1]...), other[1:len(parts)]...)
	type input struct {
		Manifest Manifest
		Parts    []string
	}
	out := python3(t, `d = json.load(sys.stdin)
for i in d["inputs"]:
    print(json.dumps(agent.unpack(i["Manifest"], i["Parts"], d["limit"])))`,
		map[string]any{"limit": MaxUnpackedBytes, "inputs": []input{{m, parts}, {m, mixed}, {m, parts[:len(parts)-1]}}})
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("the agent answered %q", out)
	}
	var got Config
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil || got != c {
		t.Errorf("the agent unpacked %s, want the config packed (%v)", lines[0][:min(len(lines[0]), 200)], err)
	}
	for i, l := range lines[1:] {
		if l != "null" {
			t.Errorf("input %d, parts that do not match the manifest: the agent answered %.200s, want None", i+2, l)
		}
	}
}

// Every part of both packed parameters is among ParameterPaths, which Delete removes, and no two names are
// alike.
func TestParameterPaths(t *testing.T) {
	t.Parallel()
	paths := ParameterPaths("p")
	seen := map[string]bool{}
	for _, p := range paths {
		if seen[p] || !strings.HasPrefix(p, ParameterPath("p", "")) {
			t.Errorf("path %s twice or outside the proxy's", p)
		}
		seen[p] = true
	}
	for _, base := range []string{ParameterConfig, ParameterSettings} {
		if !seen[ParameterPath("p", PartName(base, MaxParts))] || seen[ParameterPath("p", PartName(base, MaxParts+1))] {
			t.Errorf("the parts of %s among the paths are not 1 to %d", base, MaxParts)
		}
	}
	if len(paths) != 4+2*MaxParts {
		t.Errorf("%d paths", len(paths))
	}
}
