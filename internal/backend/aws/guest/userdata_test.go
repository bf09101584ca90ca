package guest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

func TestRenderUserData(t *testing.T) {
	t.Parallel()
	base := UserDataOptions{Region: "eu-west-1", ParameterPrefix: ParameterPath("proxy-1", "")}
	for name, tc := range map[string]struct {
		opts      UserDataOptions
		overrides Overrides
		want      map[string]any // agent.json's values
		wantErr   string
	}{
		"defaults": {opts: base, want: map[string]any{
			"region": "eu-west-1", "prefix": "/egress-proxy/proxy-1/", "ssm_endpoint": "https://ssm.eu-west-1.amazonaws.com",
			"imds_endpoint": "http://169.254.169.254", "interval": 30.0, "token_ttl": 21600.0, "health_port": float64(proxyconf.DefaultHealthPort), "health_path": proxyconf.HealthPath,
		}},
		"test endpoints": {
			opts:      UserDataOptions{Region: "us-east-1", ParameterPrefix: "/egress-proxy/p/"},
			overrides: Overrides{IMDSEndpoint: "http://127.0.0.1:8081", WatchInterval: 2, TokenTTL: 5, PlainSSMEndpoint: "http://198.18.0.4:8080"},
			want: map[string]any{
				"ssm_endpoint": "http://198.18.0.4:8080", "imds_endpoint": "http://127.0.0.1:8081", "interval": 2.0, "token_ttl": 5.0,
			},
		},
		"private endpoint": {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, SSMEndpoint: "https://vpce-1.ssm.eu-west-1.vpce.amazonaws.com"},
			want: map[string]any{"ssm_endpoint": "https://vpce-1.ssm.eu-west-1.vpce.amazonaws.com"}},
		"china region": {opts: UserDataOptions{Region: "cn-north-1", ParameterPrefix: base.ParameterPrefix}, want: map[string]any{
			"ssm_endpoint": "https://ssm.cn-north-1.amazonaws.com.cn",
		}},
		"ssm endpoint over http": {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, SSMEndpoint: "http://ssm.example"}, wantErr: "must be an https URL"},
		"gov cloud region": {opts: UserDataOptions{Region: "us-gov-west-1", ParameterPrefix: base.ParameterPrefix}, want: map[string]any{
			"ssm_endpoint": "https://ssm.us-gov-west-1.amazonaws.com",
		}},
		"no region":             {opts: UserDataOptions{ParameterPrefix: base.ParameterPrefix}, wantErr: "not an AWS region"},
		"region with a quote":   {opts: UserDataOptions{Region: "eu-west-1'", ParameterPrefix: base.ParameterPrefix}, wantErr: "not an AWS region"},
		"prefix without slash":  {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: "/egress-proxy/p"}, wantErr: "must be /egress-proxy/"},
		"prefix elsewhere":      {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: "/other/p/"}, wantErr: "must be /egress-proxy/"},
		"prefix two levels":     {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: "/egress-proxy/a/b/"}, wantErr: "must be /egress-proxy/"},
		"ssm endpoint ftp":      {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, SSMEndpoint: "ftp://x"}, wantErr: "https URL"},
		"ssm endpoint no host":  {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, SSMEndpoint: "https://"}, wantErr: "http or https URL"},
		"ssm endpoint query":    {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, SSMEndpoint: "https://x/?a=b"}, wantErr: "http or https URL"},
		"imds endpoint user":    {opts: base, overrides: Overrides{IMDSEndpoint: "http://u:p@127.0.0.1"}, wantErr: "http or https URL"},
		"token ttl beyond imds": {opts: base, overrides: Overrides{TokenTTL: 21601}, wantErr: "token TTL"},
		"token ttl negative":    {opts: base, overrides: Overrides{TokenTTL: -1}, wantErr: "token TTL"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := RenderUserDataWith(tc.opts, tc.overrides)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxUserDataBytes {
				t.Errorf("user-data is %d bytes, more than EC2 takes", len(b))
			}
			settings, agent := userDataParts(t, b)
			var got map[string]any
			if err := json.Unmarshal([]byte(settings), &got); err != nil {
				t.Fatalf("agent.json: %v\n%s", err, settings)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("agent.json %s = %v, want %v", k, got[k], v)
				}
			}
			// The agent arrives whole (TestAgentInUserData), and the shell reads the script (a template slip would
			// break every boot).
			if !bytes.Equal(agent, agentForUserData()) {
				t.Error("the agent in the user-data is not agent.py without its comment lines")
			}
			if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
				t.Error("the user-data is not gzip, which cloud-init uncompresses")
			}
			script, err := DecodeUserData(b)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "user-data")
			if err := os.WriteFile(path, script, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
				t.Fatalf("sh -n: %v\n%s", err, out)
			}
		})
	}
}

// userDataParts returns agent.json and the agent as the user-data's here-documents hold them, read as
// cloud-init reads the user-data (DecodeUserData).
func userDataParts(t *testing.T, userData []byte) (settings string, agent []byte) {
	t.Helper()
	script, err := DecodeUserData(userData)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(script), "<<'EGRESS_EOF'\n")
	if len(docs) < 3 {
		t.Fatalf("user-data has %d quoted here-documents, want the settings and the agent first", len(docs)-1)
	}
	doc := func(d string) string {
		blob, _, ok := strings.Cut(d, "\nEGRESS_EOF\n")
		if !ok {
			t.Fatalf("a here-document without its end: %.200s", d)
		}
		return blob
	}
	return doc(docs[1]), []byte(doc(docs[2]) + "\n")
}

// The user-data carries the agent without its comment lines: the same program, syntax tree for syntax tree.
func TestAgentInUserData(t *testing.T) {
	t.Parallel()
	out := python3(t, `import ast
d = json.load(sys.stdin)
print(ast.dump(ast.parse(d[0])) == ast.dump(ast.parse(d[1])))`, []string{string(agentScript), string(agentForUserData())})
	if strings.TrimSpace(string(out)) != "True" {
		t.Error("the agent without its comment lines is another program")
	}
	if len(agentForUserData()) >= len(agentScript) {
		t.Error("no comment line was left out")
	}
}

// python3 runs code with the agent importable as "agent", feeding it input on stdin, and returns its stdout.
// python3 is part of every test environment (scripts/install-deps.sh); only -short skips without it.
func python3(t *testing.T, code string, input any) []byte {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if testing.Short() {
			t.Skip("python3 not installed; skipped in -short mode")
		}
		t.Fatal("python3 not found: the EC2 guest's agent is Python (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.py"), agentScript, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import sys, json\nsys.path.insert(0, sys.argv[1])\nimport agent\n"+code, dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, stderr.String())
	}
	return out
}

// The agent checks that the config parameter's id names the files it read with it: its id must be ConfigID's,
// byte for byte, or a guest would refuse every config.
func TestAgentConfigIDIsConfigID(t *testing.T) {
	t.Parallel()
	type files struct{ Conf, Pass, Cert, Key, Backstop string }
	cases := map[string]files{
		"plain":          {Conf: "http_port 3128\n", Backstop: "table inet egress_proxy\n"},
		"with password":  {Conf: "c", Pass: "u:$2y$05$hash\n", Backstop: "b"},
		"with tls":       {Conf: "c", Pass: "u:h\n", Cert: "CERT", Key: "KEY", Backstop: "b"},
		"no backstop":    {Conf: "c", Pass: "u:h\n"},
		"non-ascii conf": {Conf: "# é ü\nhttp_port 3128\n", Backstop: "b"},
		"empty":          {},
	}
	var rendered files
	s := proxyconf.Settings{Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"},
		Users: []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}}}
	config, secrets, _, err := RenderParameters(s, ParameterPath("p", ""), make([]byte, ConfigKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	var sec Secrets
	if json.Unmarshal(config, &c) != nil || json.Unmarshal(secrets, &sec) != nil {
		t.Fatal("RenderParameters' values are not JSON")
	}
	rendered = files{Conf: c.SquidConf, Pass: sec.Htpasswd, Cert: c.TLSCert, Key: sec.TLSKey, Backstop: c.Backstop}
	cases["rendered"] = rendered
	names := slices.Sorted(maps.Keys(cases))
	var inputs []files
	for _, name := range names {
		inputs = append(inputs, cases[name])
	}
	out := python3(t, `for f in json.load(sys.stdin):
    print(agent.config_id(*(f[k].encode() for k in ("Conf", "Pass", "Cert", "Key", "Backstop"))))`, inputs)
	got := strings.Fields(string(out))
	for i, name := range names {
		f := cases[name]
		want := vmguest.ConfigID([]byte(f.Conf), []byte(f.Pass), []byte(f.Cert), []byte(f.Key), []byte(f.Backstop))
		if i >= len(got) || got[i] != want {
			t.Errorf("%s: the agent's id %v, ConfigID %s", name, got, want)
		}
	}
	if c.ConfigID != vmguest.ConfigID([]byte(rendered.Conf), []byte(rendered.Pass), nil, nil, []byte(rendered.Backstop)) {
		t.Error("RenderParameters' config id is not ConfigID of its files")
	}
}

// The agent's id of a config with a client CA or CRL is vmguest.WithClientCA's, as RenderParameters names
// it: otherwise the agent would take every such config for half of a write and never apply it.
func TestAgentConfigIDNamesClientCA(t *testing.T) {
	t.Parallel()
	type input struct{ ID, CA, CRL string }
	cases := map[string]input{
		"neither":       {ID: "0123456789abcdef"},
		"a CA":          {ID: "0123456789abcdef", CA: "CA PEM"},
		"a CA and CRL":  {ID: "0123456789abcdef", CA: "CA PEM", CRL: "CRL PEM"},
		"bytes moved":   {ID: "0123456789abcdef", CA: "CA PE", CRL: "MCRL PEM"},
		"non-ascii PEM": {ID: "fedcba9876543210", CA: "é", CRL: "ü"},
	}
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	ca := testutil.NewClientCA(t, "client CA")
	s := proxyconf.Settings{Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"},
		TLS: &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.PEM, ClientCRLPEM: ca.CRL(t, 1)}}
	config, secrets, id, err := RenderParameters(s, ParameterPath("p", ""), make([]byte, ConfigKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	var sec Secrets
	if json.Unmarshal(config, &c) != nil || json.Unmarshal(secrets, &sec) != nil {
		t.Fatal("RenderParameters' values are not JSON")
	}
	if c.ClientCA != ca.PEM || c.ClientCRL != s.TLS.ClientCRLPEM || id != c.ConfigID {
		t.Fatalf("the rendered config does not carry the client CA and CRL under its id: %+v", c)
	}
	cases["rendered"] = input{ID: vmguest.ConfigID([]byte(c.SquidConf), nil, []byte(c.TLSCert), []byte(sec.TLSKey), []byte(c.Backstop)), CA: c.ClientCA, CRL: c.ClientCRL}
	names := slices.Sorted(maps.Keys(cases))
	var inputs []input
	for _, name := range names {
		inputs = append(inputs, cases[name])
	}
	out := python3(t, `for f in json.load(sys.stdin):
    print(agent.with_client_ca(f["ID"], f["CA"].encode(), f["CRL"].encode()))`, inputs)
	got := strings.Fields(string(out))
	for i, name := range names {
		f := cases[name]
		want := vmguest.WithClientCA(f.ID, f.CA, f.CRL)
		if i >= len(got) || got[i] != want {
			t.Errorf("%s: the agent's id %v, WithClientCA %s", name, got, want)
		}
	}
	if want := cases["rendered"]; vmguest.WithClientCA(want.ID, want.CA, want.CRL) != id {
		t.Error("RenderParameters' config id is not WithClientCA of its files")
	}
}

// The agent's id of a config with metrics ports is WithMetrics', as RenderParameters names it: otherwise the
// agent would take every such config for half of a write, and a config whose ports alone moved would keep
// the id the guest already runs.
func TestAgentConfigIDNamesMetrics(t *testing.T) {
	t.Parallel()
	type input struct {
		ID    string
		Ports *MetricsPorts
	}
	s := proxyconf.Settings{Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"10.0.0.0/8"}, LogFormat: proxyconf.LogFormatJSON,
		Metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"192.0.2.0/24"}}}
	config, _, id, err := RenderParameters(s, ParameterPath("p", ""), make([]byte, ConfigKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	if json.Unmarshal(config, &c) != nil || c.Metrics == nil || id != c.ConfigID {
		t.Fatalf("the rendered config does not carry its metrics ports under its id: %s", config)
	}
	files := vmguest.ConfigID([]byte(c.SquidConf), nil, nil, nil, []byte(c.Backstop))
	if WithMetrics(files, c.Metrics) != id {
		t.Error("RenderParameters' config id is not WithMetrics of its files and ports")
	}
	cases := map[string]input{
		"none":     {ID: "0123456789abcdef"},
		"rendered": {ID: files, Ports: c.Metrics},
		"moved":    {ID: files, Ports: &MetricsPorts{Port: 9100, SquidPort: c.Metrics.SquidPort, ManagerPort: c.Metrics.ManagerPort}},
	}
	names := slices.Sorted(maps.Keys(cases))
	var inputs []input
	for _, name := range names {
		inputs = append(inputs, cases[name])
	}
	out := python3(t, `for f in json.load(sys.stdin):
    print(agent.with_metrics(f["ID"], f["Ports"] and {"port": f["Ports"]["port"], "squid_port": f["Ports"]["squid_port"], "manager_port": f["Ports"]["manager_port"]}))`, inputs)
	got := strings.Fields(string(out))
	for i, name := range names {
		if want := WithMetrics(cases[name].ID, cases[name].Ports); i >= len(got) || got[i] != want {
			t.Errorf("%s: the agent's id %v, WithMetrics %s", name, got, want)
		}
	}
	if WithMetrics(files, cases["moved"].Ports) == id {
		t.Error("moving a metrics port keeps the config id")
	}
}

// The agent signs its SSM calls itself (no SDK on the image): its Signature Version 4 must be the AWS SDK's,
// header for header, for the requests it sends.
func TestAgentSignsAsTheSDK(t *testing.T) {
	t.Parallel()
	creds := aws.Credentials{AccessKeyID: "ASIAEXAMPLEEXAMPLE01", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "FQoGZXIvYXdzEXAMPLE//token+with/slashes="}
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	type request struct {
		Name, URL, Region, Target, Body string
	}
	reqs := []request{
		{Name: "GetParameters", URL: "https://ssm.eu-west-1.amazonaws.com", Region: "eu-west-1", Target: "AmazonSSM.GetParameters",
			Body: `{"Names": ["/egress-proxy/p/config", "/egress-proxy/p/secrets"], "WithDecryption": true}`},
		{Name: "PutParameter on a test endpoint", URL: "http://198.18.0.4:8080", Region: "us-east-1", Target: "AmazonSSM.PutParameter",
			Body: `{"Name": "/egress-proxy/p/applied", "Value": "0123456789abcdef", "Type": "String", "Overwrite": true}`},
		{Name: "endpoint with a path", URL: "https://vpce.example/ssm/", Region: "ap-southeast-2", Target: "AmazonSSM.GetParameters", Body: `{}`},
	}
	out := python3(t, `import datetime
inp = json.load(sys.stdin)
now = datetime.datetime.fromisoformat(inp["when"])
for r in inp["reqs"]:
    h = agent.sign("POST", r["URL"], r["Region"], "ssm", {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": r["Target"]},
                   r["Body"].encode(), tuple(inp["creds"]), now)
    print(json.dumps(h))`, map[string]any{"when": when.Format(time.RFC3339), "reqs": reqs,
		"creds": []string{creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken}})
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(reqs) {
		t.Fatalf("the agent signed %d requests, want %d: %s", len(lines), len(reqs), out)
	}
	for i, r := range reqs {
		var got map[string]string
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, r.URL, strings.NewReader(r.Body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", r.Target)
		sum := sha256.Sum256([]byte(r.Body))
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ssm", r.Region, when); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
			if got[strings.ToLower(h)] != req.Header.Get(h) {
				t.Errorf("%s: %s\n agent %q\n SDK   %q", r.Name, h, got[strings.ToLower(h)], req.Header.Get(h))
			}
		}
	}
}

// With CloudWatch Logs, agent.json tells the agent where the access log goes: the group and stream, the
// region's HTTPS endpoint unless one is given, the file Squid writes; a plain HTTP endpoint is for tests only.
// The largest user-data (logs on, every endpoint given, the longest names) still fits EC2's limit.
func TestRenderUserDataLogs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 63)
	base := UserDataOptions{Region: "eu-west-1", ParameterPrefix: ParameterPath("proxy-1", "")}
	for name, tc := range map[string]struct {
		opts      UserDataOptions
		overrides Overrides
		want      agentLogs
		wantErr   string
	}{
		"the region's endpoint": {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, Logs: &LogsTarget{Group: "/egress-proxy/proxy-1", Stream: "proxy-1"}},
			want: agentLogs{Group: "/egress-proxy/proxy-1", Stream: "proxy-1", Endpoint: "https://logs.eu-west-1.amazonaws.com", Path: proxyconf.AccessLogPath, Flush: logsFlush}},
		"china": {opts: UserDataOptions{Region: "cn-north-1", ParameterPrefix: base.ParameterPrefix, Logs: &LogsTarget{Group: "shared", Stream: "proxy-1"}},
			want: agentLogs{Group: "shared", Stream: "proxy-1", Endpoint: "https://logs.cn-north-1.amazonaws.com.cn", Path: proxyconf.AccessLogPath, Flush: logsFlush}},
		"largest": {opts: UserDataOptions{Region: "ap-southeast-4", ParameterPrefix: ParameterPath(long, ""), SSMEndpoint: "https://vpce-0123456789abcdef0-abcdefgh.ssm.ap-southeast-4.vpce.amazonaws.com",
			Logs: &LogsTarget{Group: strings.Repeat("g", 512), Stream: long, Endpoint: "https://vpce-0123456789abcdef0-abcdefgh.logs.ap-southeast-4.vpce.amazonaws.com"}},
			want: agentLogs{Group: strings.Repeat("g", 512), Stream: long, Endpoint: "https://vpce-0123456789abcdef0-abcdefgh.logs.ap-southeast-4.vpce.amazonaws.com", Path: proxyconf.AccessLogPath, Flush: logsFlush}},
		"a test's plain endpoint": {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, Logs: &LogsTarget{Group: "g", Stream: "s"}},
			overrides: Overrides{PlainLogsEndpoint: "http://198.18.0.4:8080", LogsFlush: 1},
			want:      agentLogs{Group: "g", Stream: "s", Endpoint: "http://198.18.0.4:8080", Path: proxyconf.AccessLogPath, Flush: 1}},
		"plain http": {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, Logs: &LogsTarget{Group: "g", Stream: "s", Endpoint: "http://logs.example"}}, wantErr: "must be an https URL"},
		"no stream":  {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, Logs: &LogsTarget{Group: "g"}}, wantErr: "must be set"},
		"a quote":    {opts: UserDataOptions{Region: "eu-west-1", ParameterPrefix: base.ParameterPrefix, Logs: &LogsTarget{Group: "g'", Stream: "s"}}, wantErr: "without quotes"},
		"logs off":   {opts: base},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := RenderUserDataWith(tc.opts, tc.overrides)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxUserDataBytes {
				t.Errorf("user-data is %d bytes, more than EC2 takes", len(b))
			}
			t.Logf("%d bytes of user-data", len(b))
			settings, _ := userDataParts(t, b)
			var got agentSettings
			if err := json.Unmarshal([]byte(settings), &got); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.opts.Logs == nil && got.Logs != nil:
				t.Errorf("logs %+v without CloudWatch Logs", got.Logs)
			case tc.opts.Logs != nil && (got.Logs == nil || *got.Logs != tc.want):
				t.Errorf("logs %+v, want %+v", got.Logs, tc.want)
			}
		})
	}
}
