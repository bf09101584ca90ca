package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// libvirtCodeClasses is the class of every libvirt error code the backend can meet, each with a message
// it may carry. Written out here rather than read from codeClasses, so a changed class shows as a diff.
var libvirtCodeClasses = []struct {
	code libvirt.ErrorNumber
	msg  string
	want backend.Class
}{
	{libvirt.ErrNoDomain, "Domain not found: no domain with matching name 'x'", backend.ClassNotFound},
	{libvirt.ErrNoStorageVol, "Storage volume not found: no storage vol with matching name 'x-seed.iso'", backend.ClassNotFound},
	// Networks and pools are the host's: missing means a configuration to correct, never "deleted outside".
	{libvirt.ErrNoNetwork, "Network not found: no network with matching name 'egress'", backend.ClassPermanent},
	{libvirt.ErrNoStoragePool, "Storage pool not found: no storage pool with matching name 'egress'", backend.ClassPermanent},
	{libvirt.ErrNoNetworkPort, "Network port not found", backend.ClassPermanent},
	{libvirt.ErrNoInterface, "Interface not found", backend.ClassPermanent},
	{libvirt.ErrNoNwfilter, "Network filter not found", backend.ClassPermanent},
	{libvirt.ErrNoSecret, "Secret not found", backend.ClassPermanent},
	{libvirt.ErrNoNodeDevice, "Node device not found", backend.ClassPermanent},
	{libvirt.ErrNoDomainMetadata, "metadata not found: Requested metadata element is not present", backend.ClassPermanent},
	{libvirt.ErrNoNetworkMetadata, "metadata not found", backend.ClassPermanent},
	{libvirt.ErrNoMemory, "out of memory", backend.ClassQuota},
	{libvirt.ErrAccessDenied, "access denied: 'write' not allowed", backend.ClassPermanent},
	{libvirt.ErrAuthFailed, "authentication failed: too many authentication failures", backend.ClassPermanent},
	{libvirt.ErrAuthCancelled, "authentication cancelled", backend.ClassPermanent},
	{libvirt.ErrAuthUnavailable, "authentication unavailable: no polkit agent available", backend.ClassPermanent},
	{libvirt.ErrOperationDenied, "operation forbidden: read only access prevents virDomainCreate", backend.ClassPermanent},
	{libvirt.ErrGnutlsError, "TLS certificate check failed", backend.ClassPermanent},
	{libvirt.ErrSSH, "SSH transport error", backend.ClassPermanent},
	{libvirt.ErrLibssh, "libssh transport error", backend.ClassPermanent},
	{libvirt.ErrNoSecurityModel, "security model not found", backend.ClassPermanent},
	{libvirt.ErrNoConnect, "no connection driver available for foo:///system", backend.ClassPermanent},
	{libvirt.ErrUnknownHost, "unknown host", backend.ClassPermanent},
	{libvirt.ErrNoSupport, "this function is not supported by the connection driver", backend.ClassPermanent},
	{libvirt.ErrConfigUnsupported, "unsupported configuration: domain type kvm is not available", backend.ClassPermanent},
	{libvirt.ErrOperationUnsupported, "Operation not supported: passt", backend.ClassPermanent},
	{libvirt.ErrArgumentUnsupported, "argument unsupported", backend.ClassPermanent},
	{libvirt.ErrCPUIncompatible, "the CPU is incompatible with host CPU", backend.ClassPermanent},
	{libvirt.ErrXMLError, "XML error: bad", backend.ClassPermanent},
	{libvirt.ErrXMLDetail, "XML description is invalid", backend.ClassPermanent},
	{libvirt.ErrXMLInvalidSchema, "XML document failed to validate against schema", backend.ClassPermanent},
	{libvirt.ErrInvalidArg, "invalid argument: too many interfaces", backend.ClassPermanent},
	{libvirt.ErrInvalidMac, "invalid MAC address", backend.ClassPermanent},
	{libvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running", backend.ClassPermanent},
	{libvirt.ErrDomExist, "operation failed: domain 'x' already exists", backend.ClassPermanent},
	{libvirt.ErrStorageVolExist, "storage volume 'x' exists already", backend.ClassPermanent},
	{libvirt.ErrNetworkExist, "network already exists", backend.ClassPermanent},
	{libvirt.ErrMultipleDomains, "multiple domains", backend.ClassPermanent},
	{libvirt.ErrOsType, "unknown OS type", backend.ClassPermanent},
	{libvirt.ErrNoSource, "missing source information", backend.ClassPermanent},
	{libvirt.ErrNoTarget, "missing target information", backend.ClassPermanent},
	{libvirt.ErrNoName, "missing name information", backend.ClassPermanent},
	{libvirt.ErrNoOs, "missing operating system information", backend.ClassPermanent},
	{libvirt.ErrNoDevice, "missing devices information", backend.ClassPermanent},
	{libvirt.ErrDeviceMissing, "device not found", backend.ClassPermanent},
	{libvirt.ErrInvalidDomain, "invalid domain pointer", backend.ClassPermanent},
	{libvirt.ErrInvalidNetwork, "invalid network pointer", backend.ClassPermanent},
	{libvirt.ErrInvalidStoragePool, "invalid storage pool pointer", backend.ClassPermanent},
	{libvirt.ErrInvalidStorageVol, "invalid storage volume pointer", backend.ClassPermanent},
	{libvirt.ErrOverflow, "value too large", backend.ClassPermanent},
	{libvirt.ErrRPC, "End of file while reading data: Input/output error", backend.ClassTransient},
	{libvirt.ErrInvalidConn, "invalid connection pointer", backend.ClassTransient},
	{libvirt.ErrOperationTimeout, "Timed out during operation: cannot acquire state change lock", backend.ClassTransient},
	{libvirt.ErrAgentUnresponsive, "Guest agent is not responding", backend.ClassTransient},
	{libvirt.ErrAgentUnsynced, "guest agent not synchronised", backend.ClassTransient},
	{libvirt.ErrAgentCommandTimeout, "guest agent command timed out", backend.ClassTransient},
	{libvirt.ErrResourceBusy, "resource busy", backend.ClassTransient},
	{libvirt.ErrOperationAborted, "operation aborted", backend.ClassTransient},
	{libvirt.ErrNoServer, "no server", backend.ClassTransient},
	{libvirt.ErrNoClient, "no client", backend.ClassTransient},
}

// Codes that carry another component's failure, decided by their text; anything they do not say is Unclassified.
var libvirtTextCases = map[string]struct {
	code libvirt.ErrorNumber
	msg  string
	want backend.Class
}{
	"qemu cannot allocate":  {libvirt.ErrInternalError, "internal error: qemu unexpectedly closed the monitor: cannot set up guest memory 'pc.ram': Cannot allocate memory", backend.ClassQuota},
	"pool full":             {libvirt.ErrSystemError, "cannot allocate 2147483648 bytes in file '/pool/x': No space left on device", backend.ClassQuota},
	"disk quota":            {libvirt.ErrOperationFailed, "write failed: Disk quota exceeded", backend.ClassQuota},
	"qemu may not open":     {libvirt.ErrInternalError, "process exited while connecting to monitor: Could not open '/pool/x.qcow2': Permission denied", backend.ClassPermanent},
	"system eperm":          {libvirt.ErrSystemError, "Unable to create tap device: Operation not permitted", backend.ClassPermanent},
	"system reset":          {libvirt.ErrSystemError, "Cannot recv data: Connection reset by peer", backend.ClassTransient},
	"system timed out":      {libvirt.ErrSystemError, "unable to connect to server: Connection timed out", backend.ClassTransient},
	"probe failed":          {libvirt.ErrStorageProbeFailed, "probing failed", backend.ClassUnclassified},
	"hook failed":           {libvirt.ErrHookScriptFailed, "Hook script execution failed", backend.ClassUnclassified},
	"agent command failed":  {libvirt.ErrAgentCommandFailed, "guest agent command failed", backend.ClassUnclassified},
	"internal, no words":    {libvirt.ErrInternalError, "internal error: unexpected reply", backend.ClassUnclassified},
	"operation failed":      {libvirt.ErrOperationFailed, "operation failed: domain is already active", backend.ClassUnclassified},
	"unknown code":          {libvirt.ErrorNumber(999), "something new", backend.ClassUnclassified},
	"read failed, no words": {libvirt.ErrReadFailed, "failed to read", backend.ClassUnclassified},
	// Quota words in another code's message describe that code's own failure, not a host out of room.
	"too many in auth":         {libvirt.ErrAuthFailed, "too many authentication failures", backend.ClassPermanent},
	"insufficient in access":   {libvirt.ErrAccessDenied, "insufficient privileges", backend.ClassPermanent},
	"too many in invalid arg":  {libvirt.ErrInvalidArg, "too many vcpus for this machine type", backend.ClassPermanent},
	"no space in xml":          {libvirt.ErrXMLError, "XML error: no space left on device in <name>", backend.ClassPermanent},
	"memory in operation busy": {libvirt.ErrResourceBusy, "cannot allocate memory for the lock", backend.ClassTransient},
}

func TestClassifyLibvirtCodes(t *testing.T) {
	t.Parallel()
	tested := map[libvirt.ErrorNumber]bool{}
	for _, tc := range libvirtCodeClasses {
		tested[tc.code] = true
		t.Run(tc.code.String(), func(t *testing.T) {
			t.Parallel()
			err := classify("kvm domain x on host h", libvirt.Error{Code: uint32(tc.code), Message: tc.msg})
			if got := backend.ClassOf(err); got != tc.want {
				t.Errorf("class = %v, want %v (%v)", got, tc.want, err)
			}
		})
	}
	for name, tc := range libvirtTextCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("kvm domain x on host h", libvirt.Error{Code: uint32(tc.code), Message: tc.msg})
			if got := backend.ClassOf(err); got != tc.want {
				t.Errorf("class = %v, want %v (%v)", got, tc.want, err)
			}
		})
	}
	// Every code the classifier decides by code is in the table above.
	for code := range codeClasses {
		if !tested[code] {
			t.Errorf("libvirt code %v is classified but not tested", code)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	lv := func(code libvirt.ErrorNumber, msg string) error {
		return libvirt.Error{Code: uint32(code), Message: msg}
	}
	// dialing wraps err as the pool wraps a failed dial.
	dialing := func(err error) error { return fmt.Errorf("connecting to kvm host \"h\" (qemu:///system): %w", err) }
	tests := map[string]struct {
		err  error
		want backend.Class
	}{
		"wrapped libvirt":     {fmt.Errorf("defining: %w", lv(libvirt.ErrNoDomain, "gone")), backend.ClassNotFound},
		"deadline":            {context.DeadlineExceeded, backend.ClassTransient},
		"cancelled":           {context.Canceled, backend.ClassTransient},
		"refused":             {&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, backend.ClassTransient},
		"missing socket":      {&net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}, backend.ClassTransient},
		"eof":                 {io.EOF, backend.ClassTransient},
		"interrupted":         {libvirt.ErrInterrupted, backend.ClassTransient},
		"dropped mid-call":    {&libvirtconn.ConnLostError{Host: "h", Err: errors.New("x")}, backend.ClassTransient},
		"unsupported call":    {libvirt.ErrUnsupported, backend.ClassPermanent},
		"bad ssh key":         {dialing(&libvirtconn.ConfigError{Err: errors.New("no key")}), backend.ClassPermanent},
		"dial refused":        {dialing(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), backend.ClassTransient},
		"dial auth refused":   {dialing(lv(libvirt.ErrAuthFailed, "authentication failed")), backend.ClassPermanent},
		"unreachable":         {&libvirtconn.UnreachableError{Host: "h", URI: "qemu:///system", Last: &net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}}, backend.ClassPermanent},
		"unreachable, rpc":    {&libvirtconn.UnreachableError{Host: "h", URI: "qemu:///system", Last: lv(libvirt.ErrRPC, "eof")}, backend.ClassPermanent},
		"already classified":  {backend.Quota("x", "full"), backend.ClassQuota},
		"unknown non-libvirt": {errors.New("encoding failed"), backend.ClassUnclassified},
		"socket not permitted": {dialing(&net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}),
			backend.ClassPermanent},
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

// A connection the host refuses, by the socket's permissions or by libvirt's check of the user, is Permanent
// (no dial retry) with advice naming what the user needs and the document that says it; other Permanent
// errors get no such advice.
func TestAccessAdvice(t *testing.T) {
	t.Parallel()
	lv := func(code libvirt.ErrorNumber, msg string) error {
		return libvirt.Error{Code: uint32(code), Message: msg}
	}
	for name, tc := range map[string]struct {
		err    error
		advice bool
	}{
		"socket permissions": {&net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}, true},
		"polkit said no":     {lv(libvirt.ErrAuthFailed, "authentication failed: access denied by policy"), true},
		"no polkit agent":    {lv(libvirt.ErrAuthUnavailable, "authentication unavailable: no polkit agent available"), true},
		"acl":                {lv(libvirt.ErrAccessDenied, "access denied: 'domain:write'"), true},
		"missing pool":       {lv(libvirt.ErrNoStoragePool, "no pool"), false},
		"guest file denied":  {lv(libvirt.ErrInternalError, "Permission denied"), false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("kvm host h", tc.err)
			got := backend.AdviceOf(err)
			if has := strings.Contains(got, PermissionsDocument); has != tc.advice {
				t.Errorf("advice %q (class %v): want the access advice %v", got, backend.ClassOf(err), tc.advice)
			}
			if tc.advice && backend.ClassOf(err) != backend.ClassPermanent {
				t.Errorf("class %v, want Permanent", backend.ClassOf(err))
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
	var be *backend.Error
	if !errors.As(inner, &be) || be.Object != "kvm domain x on host h" {
		t.Errorf("object of an inner classified error = %v", inner)
	}
}
