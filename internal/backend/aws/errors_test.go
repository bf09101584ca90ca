package aws

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// apiError is an error as the SDK returns a service's answer: the code, inside the HTTP response error.
func apiError(code string, status int) error {
	return &smithy.OperationError{ServiceID: "EC2", OperationName: "RunInstances", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      &smithy.GenericAPIError{Code: code, Message: "the service's words"},
	}}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err        error
		want       backend.Class
		wantAdvice bool
	}{
		"instance limit":          {apiError("InstanceLimitExceeded", 400), backend.ClassQuota, true},
		"vcpu limit":              {apiError("VcpuLimitExceeded", 400), backend.ClassQuota, true},
		"address limit":           {apiError("AddressLimitExceeded", 400), backend.ClassQuota, true},
		"rules per group":         {apiError("RulesPerSecurityGroupLimitExceeded", 400), backend.ClassQuota, true},
		"capacity":                {apiError("InsufficientInstanceCapacity", 500), backend.ClassTransient, false},
		"throttled":               {apiError("RequestLimitExceeded", 503), backend.ClassTransient, false},
		"ssm throttled":           {apiError("ThrottlingException", 400), backend.ClassTransient, false},
		"quotas throttled":        {apiError("TooManyRequestsException", 400), backend.ClassTransient, false},
		"quotas denied":           {apiError("AccessDeniedException", 400), backend.ClassPermanent, true},
		"unauthorized":            {apiError("UnauthorizedOperation", 403), backend.ClassPermanent, true},
		"bad parameter":           {apiError("InvalidParameterValue", 400), backend.ClassPermanent, false},
		"unknown code, 5xx":       {apiError("SomethingNew", 503), backend.ClassTransient, false},
		"unknown code, 4xx":       {apiError("SomethingNew", 400), backend.ClassPermanent, false},
		"instance gone":           {apiError("InvalidInstanceID.NotFound", 400), backend.ClassNotFound, false},
		"parameter gone":          {apiError("ParameterNotFound", 400), backend.ClassNotFound, false},
		"group in use":            {apiError("DependencyViolation", 400), backend.ClassTransient, false},
		"retries exhausted":       {&retry.MaxAttemptsError{Attempt: 3, Err: errors.New("throttled")}, backend.ClassTransient, false},
		"retries exhausted, code": {&retry.MaxAttemptsError{Attempt: 3, Err: apiError("VcpuLimitExceeded", 400)}, backend.ClassQuota, true},
		"deadline":                {fmt.Errorf("op: %w", context.DeadlineExceeded), backend.ClassTransient, false},
		"connection refused":      {&net.OpError{Op: "dial", Err: errors.New("connection refused")}, backend.ClassTransient, false},
		"anything else":           {errors.New("weird"), backend.ClassUnclassified, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("aws instance p in region eu-west-1", tc.err)
			if got := backend.ClassOf(err); got != tc.want {
				t.Fatalf("class of %v = %v, want %v", tc.err, got, tc.want)
			}
			var e *backend.Error
			if !errors.As(err, &e) || e.Object != "aws instance p in region eu-west-1" {
				t.Fatalf("%v does not name the object", err)
			}
			if (e.Advice != "") != tc.wantAdvice {
				t.Errorf("advice %q, want some: %t", e.Advice, tc.wantAdvice)
			}
		})
	}
}
