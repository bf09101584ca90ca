package guest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// SSM holds 4 KB in a Standard parameter and 8 KB in an Advanced one ("Managing parameter tiers"), and a
// proxy's squid.conf and backstop alone are over 4 KB before its first destination: as one parameter, every
// config needed the Advanced tier (charged), and about 115 destinations of 20 characters filled it, while
// the schema takes 500. So a config is packed: compressed (gzip; squid.conf is repetitive text and shrinks
// three to twenty times), in base64, and cut into parts, each a Standard parameter of its own beside the
// config parameter (config-1, config-2, ...), which holds a small manifest: the config id, the number of
// parts and their SHA-256, and the config's MAC. A typical proxy's config is one part; the schema's largest
// lists, with names of a realistic length, fit in MaxParts. The settings parameter, which holds the same
// lists for Get, is packed alike (its head holds the number of parts and their SHA-256).
//
// Packing rather than storing the settings and rendering on the guest: the provider stays the only
// renderer (a guest cannot render other rules than the plan showed), and the guest installs what the
// provider wrote, authenticated as before (ConfigMAC, over the whole config as unpacked).
//
// The backend writes the parts first and the manifest last, so a guest never reads a manifest whose parts
// are not written yet; one that reads between the writes finds parts that do not match the manifest it
// holds (their SHA-256, and the MAC over what they unpack to), keeps its last good config and reads again.
// A config that shrinks leaves its former last parts behind, unread, until the proxy's delete removes every
// part a proxy may have (ParameterPaths).

// ConfigFormat is how a proxy's config reaches its guest: the agent its instance was launched with (the
// user-data installs it, once) reads one format only, so a proxy keeps the format it was made with until it
// is replaced.
type ConfigFormat int

const (
	// FormatWhole is the whole config, as JSON (Config), in the config parameter: the format of the agents
	// the provider launched before configs were packed. At most an Advanced parameter, 8192 characters.
	FormatWhole ConfigFormat = iota
	// FormatParts is a Manifest in the config parameter and the config packed in its parts (Pack).
	FormatParts
	// FormatClientCA is FormatParts read by an agent that also installs the client CA and CRL the config
	// carries (Config.ClientCA, ClientCRL). A config without them is the same in both; an agent of
	// FormatParts would find one with them not authenticated (its MAC leaves them out) and never apply it.
	FormatClientCA
	// FormatMetrics is FormatClientCA read by an agent that also runs mtail and the Squid exporter on the
	// ports the config carries (Config.Metrics). An earlier agent's guard refuses the cache manager's line
	// in squid.conf, and its MAC leaves the ports out: it would never apply a config with metrics.
	FormatMetrics
	// FormatLatest is the format of the agent this provider launches.
	FormatLatest = FormatMetrics
)

const (
	// MaxPartChars is what one part holds: a Standard parameter's value, 4096 characters.
	MaxPartChars = 4096
	// MaxParts bounds the parts of a packed value: with its head, ten names, what one GetParameters call
	// reads ("Names": at most 10), so the guest reads a config's parts in one call.
	MaxParts = 9
	// MaxPackedChars is the most a packed value's parts hold.
	MaxPackedChars = MaxParts * MaxPartChars
	// MaxUnpackedBytes bounds what a packed value unpacks to, several times the largest config the schema
	// admits (about 180 KB): parts anyone who may write them can forge are checked before they are trusted,
	// and a few kilobytes of gzip must not unpack to gigabytes.
	MaxUnpackedBytes = 1 << 20
	// partSuffix follows a parameter's name in its parts' names, with the part's number from 1.
	partSuffix = "-%d"
)

// PartName is the name of part i (from 1) of the parameter named base: config-1.
func PartName(base string, i int) string { return fmt.Sprintf(base+partSuffix, i) }

// PackedHead is what the parameter in front of a packed value holds, the settings parameter's whole value:
// how many parts there are, and the SHA-256 (hex) of their values joined.
type PackedHead struct {
	Parts  int    `json:"parts"`
	SHA256 string `json:"sha256"`
}

// Manifest is the config parameter's value in FormatParts: the packed config's head, its id and its MAC
// (ConfigMAC, over the config as unpacked, with this id).
type Manifest struct {
	ConfigID string `json:"config_id"`
	PackedHead
	MAC string `json:"mac"`
}

// ParseHead reads a head (PackedHead, or a Manifest, which holds one) from a parameter's value; false when
// the value is none, as a value in FormatWhole or a settings parameter an earlier provider wrote whole.
func ParseHead(value string) (PackedHead, bool) {
	var h PackedHead
	if json.Unmarshal([]byte(value), &h) != nil || h.Parts < 1 || h.SHA256 == "" {
		return PackedHead{}, false
	}
	return h, true
}

// Pack compresses b and cuts its base64 into parts of at most MaxPartChars, each a value SSM takes in a
// Standard parameter (base64 holds no "{{", which SSM refuses). It does not bound their number: callers
// check it against MaxParts (CheckParameterSizes does at plan time).
func Pack(b []byte) (PackedHead, []string) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression) // a valid level never fails
	_, _ = zw.Write(b)                                     // writes to a buffer never fail
	_ = zw.Close()
	s := base64.StdEncoding.EncodeToString(z.Bytes())
	var parts []string
	for len(s) > MaxPartChars {
		parts = append(parts, s[:MaxPartChars])
		s = s[MaxPartChars:]
	}
	parts = append(parts, s)
	return PackedHead{Parts: len(parts), SHA256: joinedSHA256(parts)}, parts
}

// ErrPartsUnmatched is Unpack's error for parts that are not the ones the head names: half of a write, a
// part changed or gone.
var ErrPartsUnmatched = errors.New("the parts do not match the SHA-256 their head names")

// Unpack is what h's parts hold: parts joined, checked against h, decoded and decompressed, at most
// MaxUnpackedBytes. The agent unpacks alike (unpack in agent.py).
func Unpack(h PackedHead, parts []string) ([]byte, error) {
	if len(parts) != h.Parts || joinedSHA256(parts) != h.SHA256 {
		return nil, ErrPartsUnmatched
	}
	var joined bytes.Buffer
	for _, p := range parts {
		joined.WriteString(p)
	}
	z, err := base64.StdEncoding.DecodeString(joined.String())
	if err != nil {
		return nil, fmt.Errorf("the parts are not base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("the parts are not gzip: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, MaxUnpackedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("the parts do not decompress: %w", err)
	}
	if len(b) > MaxUnpackedBytes {
		return nil, fmt.Errorf("the parts unpack to more than %d bytes", MaxUnpackedBytes)
	}
	return b, nil
}

func joinedSHA256(parts []string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// configFiles is what a packed config's parts hold: the config's files; its id and MAC are in the manifest.
type configFiles struct {
	SquidConf string `json:"squid_conf"`
	Backstop  string `json:"backstop"`
	TLSCert   string `json:"tls_cert,omitempty"`
	ClientCA  string `json:"client_ca,omitempty"`
	ClientCRL string `json:"client_crl,omitempty"`
	// Metrics are the metrics ports (Config.Metrics), as the agent reads them from the unpacked config.
	Metrics *MetricsPorts `json:"metrics,omitempty"`
}

// PackConfig packs c (as RenderParameters renders it, MAC included) in FormatParts: the config parameter's
// value (a Manifest) and its parts' values.
func PackConfig(c Config) (manifest []byte, parts []string, err error) {
	files, err := json.Marshal(configFiles{SquidConf: c.SquidConf, Backstop: c.Backstop, TLSCert: c.TLSCert, ClientCA: c.ClientCA, ClientCRL: c.ClientCRL,
		Metrics: c.Metrics})
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the config's files: %w", err)
	}
	head, parts := Pack(files)
	manifest, err = json.Marshal(Manifest{ConfigID: c.ConfigID, PackedHead: head, MAC: c.MAC})
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the config's manifest: %w", err)
	}
	return manifest, parts, nil
}

// LoadConfig reads a config as a guest does, in either format, from the config parameter's value and, for a
// manifest, its parts: part(i) is part i's value, false when there is none. The config is whole, its id and
// MAC the manifest's; it is not authenticated here (ConfigMAC).
func LoadConfig(value string, part func(i int) (string, bool)) (Config, ConfigFormat, error) {
	var m Manifest
	if _, packed := ParseHead(value); !packed {
		var c Config
		if err := json.Unmarshal([]byte(value), &c); err != nil {
			return Config{}, FormatWhole, fmt.Errorf("the config parameter is neither a config nor a manifest: %w", err)
		}
		return c, FormatWhole, nil
	}
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		return Config{}, FormatParts, err
	}
	if m.Parts > MaxParts {
		return Config{}, FormatParts, fmt.Errorf("the manifest names %d parts, more than %d", m.Parts, MaxParts)
	}
	parts := make([]string, 0, m.Parts)
	for i := 1; i <= m.Parts; i++ {
		p, ok := part(i)
		if !ok {
			return Config{}, FormatParts, fmt.Errorf("part %d of %d is missing: %w", i, m.Parts, ErrPartsUnmatched)
		}
		parts = append(parts, p)
	}
	b, err := Unpack(m.PackedHead, parts)
	if err != nil {
		return Config{}, FormatParts, err
	}
	var f configFiles
	if err := json.Unmarshal(b, &f); err != nil {
		return Config{}, FormatParts, fmt.Errorf("the config's parts do not hold its files: %w", err)
	}
	return Config{ConfigID: m.ConfigID, SquidConf: f.SquidConf, Backstop: f.Backstop, TLSCert: f.TLSCert,
		ClientCA: f.ClientCA, ClientCRL: f.ClientCRL, Metrics: f.Metrics, MAC: m.MAC}, FormatParts, nil
}

// ParameterPaths are the full names of every parameter a proxy may have, whatever wrote them: its config,
// settings, secrets and applied parameters, and every part the config and the settings may have. What
// removes a proxy removes them all, parts left by a longer config among them.
func ParameterPaths(proxyName string) []string {
	var paths []string
	for _, p := range []string{ParameterSettings, ParameterConfig, ParameterSecrets, ParameterApplied} {
		paths = append(paths, ParameterPath(proxyName, p))
	}
	for _, base := range []string{ParameterSettings, ParameterConfig} {
		for i := 1; i <= MaxParts; i++ {
			paths = append(paths, ParameterPath(proxyName, PartName(base, i)))
		}
	}
	return paths
}
