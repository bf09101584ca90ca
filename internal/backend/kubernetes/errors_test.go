package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	pods := schema.GroupResource{Resource: "pods"}
	tests := map[string]struct {
		err       error
		want      backend.Class
		wantInMsg string
	}{
		"not found": {apierrors.NewNotFound(deployments, "p"), backend.ClassNotFound, "not found"},
		"quota": {apierrors.NewForbidden(pods, "p-1",
			errors.New("exceeded quota: compute-small, requested: cpu=1, used: cpu=0, limited: cpu=500m")),
			backend.ClassQuota, `ResourceQuota "compute-small"`},
		"rbac":         {apierrors.NewForbidden(deployments, "p", errors.New("User \"x\" cannot create resource")), backend.ClassPermanent, "RBAC"},
		"unauthorized": {apierrors.NewUnauthorized("token expired"), backend.ClassPermanent, "credentials"},
		"invalid": {apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "p",
			field.ErrorList{field.Invalid(field.NewPath("spec"), 1, "bad")}), backend.ClassPermanent, "bad"},
		"too many requests": {apierrors.NewTooManyRequests("slow down", 7), backend.ClassTransient, "retry after 7s"},
		"server timeout":    {apierrors.NewServerTimeout(deployments, "create", 2), backend.ClassTransient, ""},
		"internal":          {apierrors.NewInternalError(errors.New("etcd")), backend.ClassTransient, "etcd"},
		"unavailable":       {apierrors.NewServiceUnavailable("starting"), backend.ClassTransient, "starting"},
		"conflict":          {apierrors.NewConflict(deployments, "p", errors.New("modified")), backend.ClassTransient, ""},
		"502":               {apierrors.NewGenericServerResponse(502, "get", deployments, "p", "", 0, false), backend.ClassTransient, ""},
		"refused": {&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
			backend.ClassTransient, "refused"},
		"deadline":   {fmt.Errorf("get: %w", context.DeadlineExceeded), backend.ClassTransient, ""},
		"unexpected": {errors.New("something else"), backend.ClassUnclassified, "something else"},
		"classified": {backend.Quota("x", "full"), backend.ClassQuota, "full"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("Deployment proxies/p on cluster test", tt.err)
			if got := backend.ClassOf(err); got != tt.want {
				t.Errorf("class %v, want %v (%v)", got, tt.want, err)
			}
			if !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Errorf("message %q lacks %q", err, tt.wantInMsg)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("the original error is not kept in the chain: %v", err)
			}
		})
	}
}

// Check reports one of the documented reasons, whatever the API server or the connection said.
func TestHealthReason(t *testing.T) {
	t.Parallel()
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for name, tt := range map[string]struct {
		err  error
		want string
	}{
		"unauthorized": {apierrors.NewUnauthorized("token expired"), backend.HealthUnauthorized},
		"forbidden":    {apierrors.NewForbidden(deployments, "p", errors.New("no")), backend.HealthUnauthorized},
		"not found":    {apierrors.NewNotFound(deployments, "p"), backend.HealthNotFound},
		"refused":      {&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, backend.HealthUnreachable},
		"server error": {apierrors.NewInternalError(errors.New("etcd")), backend.HealthError},
		"other":        {errors.New("something else"), backend.HealthError},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := healthReason(classify("cluster test", tt.err)); got != tt.want {
				t.Errorf("healthReason(%v) = %s, want %s", tt.err, got, tt.want)
			}
		})
	}
}
