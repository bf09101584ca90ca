package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	lv := func(code libvirt.ErrorNumber, msg string) error {
		return libvirt.Error{Code: uint32(code), Message: msg}
	}
	tests := map[string]struct {
		err  error
		want backend.Class
	}{
		"no domain":           {lv(libvirt.ErrNoDomain, "Domain not found: no domain with matching name 'x'"), backend.ClassNotFound},
		"no volume":           {lv(libvirt.ErrNoStorageVol, "Storage volume not found"), backend.ClassNotFound},
		"no network":          {lv(libvirt.ErrNoNetwork, "Network not found"), backend.ClassNotFound},
		"no pool":             {lv(libvirt.ErrNoStoragePool, "Storage pool not found"), backend.ClassNotFound},
		"rpc":                 {lv(libvirt.ErrRPC, "End of file while reading data: Input/output error"), backend.ClassTransient},
		"operation timeout":   {lv(libvirt.ErrOperationTimeout, "Timed out during operation: cannot acquire state change lock"), backend.ClassTransient},
		"agent unresponsive":  {lv(libvirt.ErrAgentUnresponsive, "Guest agent is not responding"), backend.ClassTransient},
		"no memory code":      {lv(libvirt.ErrNoMemory, "out of memory"), backend.ClassQuota},
		"qemu cannot alloc":   {lv(libvirt.ErrInternalError, "internal error: qemu unexpectedly closed the monitor: cannot set up guest memory 'pc.ram': Cannot allocate memory"), backend.ClassQuota},
		"pool full":           {lv(libvirt.ErrSystemError, "cannot allocate 2147483648 bytes in file '/pool/x': No space left on device"), backend.ClassQuota},
		"xml error":           {lv(libvirt.ErrXMLError, "XML error: bad"), backend.ClassPermanent},
		"invalid operation":   {lv(libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running"), backend.ClassPermanent},
		"access denied":       {lv(libvirt.ErrAccessDenied, "access denied"), backend.ClassPermanent},
		"no driver":           {lv(libvirt.ErrNoConnect, "no connection driver available for foo:///system"), backend.ClassPermanent},
		"wrapped libvirt":     {fmt.Errorf("defining: %w", lv(libvirt.ErrNoDomain, "gone")), backend.ClassNotFound},
		"deadline":            {context.DeadlineExceeded, backend.ClassTransient},
		"cancelled":           {context.Canceled, backend.ClassTransient},
		"refused":             {&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, backend.ClassTransient},
		"missing socket":      {&net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}, backend.ClassTransient},
		"eof":                 {io.EOF, backend.ClassTransient},
		"interrupted":         {libvirt.ErrInterrupted, backend.ClassTransient},
		"dropped mid-call":    {&connLostError{host: "h", err: errors.New("x")}, backend.ClassTransient},
		"unsupported call":    {libvirt.ErrUnsupported, backend.ClassPermanent},
		"bad ssh key":         {&dialError{host: "h", err: &configError{errors.New("no key")}}, backend.ClassPermanent},
		"already classified":  {backend.Quota("x", "full"), backend.ClassQuota},
		"unknown non-libvirt": {errors.New("encoding failed"), backend.ClassPermanent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("kvm domain x on host h", tc.err)
			if got := backend.ClassOf(err); got != tc.want {
				t.Errorf("class = %v, want %v (%v)", got, tc.want, err)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("the original error is not kept in %v", err)
			}
		})
	}
}

func TestClassifyNamesObjectAndKeepsMessage(t *testing.T) {
	t.Parallel()
	err := classify("kvm domain x on host h", libvirt.Error{Code: uint32(libvirt.ErrNoDomain), Message: "Domain not found: no domain with matching name 'x'"})
	want := "notfound: kvm domain x on host h: Domain not found: no domain with matching name 'x'"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	inner := classify("kvm domain x on host h", backend.Permanent("", "belongs to another proxy"))
	if backend.ObjectOf(inner) != "kvm domain x on host h" {
		t.Errorf("object of an inner classified error = %q", backend.ObjectOf(inner))
	}
}
