package kvm

import (
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	tests := map[string]struct {
		uri                                 string
		transport, host, port, socket, name string
		wantErr                             string
	}{
		"system":           {uri: "qemu:///system", transport: "unix", socket: "/var/run/libvirt/libvirt-sock", name: "qemu:///system"},
		"session":          {uri: "qemu:///session", transport: "unix", socket: "/run/user/1000/libvirt/libvirt-sock", name: "qemu:///session"},
		"test driver":      {uri: "test:///default", transport: "unix", socket: "/var/run/libvirt/libvirt-sock", name: "test:///default"},
		"own socket":       {uri: "qemu:///system?socket=/tmp/s", transport: "unix", socket: "/tmp/s", name: "qemu:///system"},
		"tcp":              {uri: "qemu+tcp://kvm1.example.com/system", transport: "tcp", host: "kvm1.example.com", port: "16509", name: "qemu:///system"},
		"tcp port":         {uri: "qemu+tcp://10.0.0.5:1234/system", transport: "tcp", host: "10.0.0.5", port: "1234", name: "qemu:///system"},
		"tls":              {uri: "qemu+tls://kvm1/system", transport: "tls", host: "kvm1", port: "16514", name: "qemu:///system"},
		"host means tls":   {uri: "qemu://kvm1/system", transport: "tls", host: "kvm1", port: "16514", name: "qemu:///system"},
		"ssh":              {uri: "qemu+ssh://root@kvm1/system?keyfile=/k", transport: "ssh", host: "kvm1", port: "", socket: "/var/run/libvirt/libvirt-sock", name: "qemu:///system"},
		"ssh name":         {uri: "qemu+ssh://kvm1:2222/system?name=qemu:///session", transport: "ssh", host: "kvm1", port: "2222", socket: "/var/run/libvirt/libvirt-sock", name: "qemu:///session"},
		"ssh own socket":   {uri: "qemu+ssh://kvm1/system?socket=/run/libvirt/virtqemud-sock", transport: "ssh", host: "kvm1", socket: "/run/libvirt/virtqemud-sock", name: "qemu:///system"},
		"relative socket":  {uri: "qemu+ssh://kvm1/system?socket=libvirt-sock", wantErr: "must be an absolute path"},
		"empty socket":     {uri: "qemu:///system?socket=", transport: "unix", socket: "/var/run/libvirt/libvirt-sock", name: "qemu:///system"},
		"empty":            {uri: "", wantErr: "empty"},
		"no scheme":        {uri: "/var/run/libvirt", wantErr: "must look like"},
		"unknown":          {uri: "qemu+ext:///system", wantErr: "not supported"},
		"tcp without host": {uri: "qemu+tcp:///system", wantErr: "needs a host"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseURI(tc.uri)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseURI(%q) error = %v, want one containing %q", tc.uri, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.transport != tc.transport || got.host != tc.host || got.port != tc.port || (tc.socket != "" && got.socket != tc.socket) || got.name != tc.name {
				t.Errorf("parseURI(%q) = %+v", tc.uri, got)
			}
		})
	}
}

func TestConfigDefaultsAndErrors(t *testing.T) {
	t.Setenv("LIBVIRT_DEFAULT_URI", "qemu+tcp://kvm9/system")
	hosts, err := Config{BaseVolume: "base"}.hosts()
	if err != nil {
		t.Fatal(err)
	}
	h := hosts[DefaultHostName]
	if h.URI != "qemu+tcp://kvm9/system" || h.Pool != DefaultPool || h.Network != DefaultNetwork || h.BaseVolume != "base" || h.DomainType != DomainTypeAuto {
		t.Errorf("default host = %+v", h)
	}
	bad := map[string]Config{
		"bad uri":         {Hosts: map[string]HostConfig{"a": {URI: "qemu+bogus:///system"}}},
		"bad domain type": {Hosts: map[string]HostConfig{"a": {URI: "qemu:///system", DomainType: "xen"}}},
		"slash in name":   {Hosts: map[string]HostConfig{"a/b": {URI: "qemu:///system"}}},
	}
	for name, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestValidateURI(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		uri  string
		want string // part of the error; empty for a valid URI
	}{
		"system":           {uri: "qemu:///system"},
		"session":          {uri: "qemu:///session"},
		"ssh":              {uri: "qemu+ssh://root@hv1.example.com/system"},
		"tls by default":   {uri: "qemu://hv1.example.com/system"},
		"test driver":      {uri: "test:///default"},
		"empty":            {uri: "", want: "empty"},
		"web address":      {uri: "http://example.com/", want: `driver "http" cannot run`},
		"xen":              {uri: "xen:///system", want: `driver "xen" cannot run`},
		"no scheme":        {uri: "/var/run/libvirt/libvirt-sock", want: "must look like"},
		"bad transport":    {uri: "qemu+bogus://h/system", want: `transport "bogus"`},
		"tcp without host": {uri: "qemu+tcp:///system", want: "needs a host"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := ValidateURI(tc.uri)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ValidateURI(%q) = %v, want nil", tc.uri, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ValidateURI(%q) = %v, want an error containing %q", tc.uri, err, tc.want)
			}
		})
	}
}
