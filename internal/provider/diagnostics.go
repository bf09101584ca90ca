package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// classText is what a diagnostic says about a class: its summary, and what to do.
type classText struct{ summary, advice string }

// classAdvice is the one mapping from error class to what the user reads: a summary and what to do.
var classAdvice = map[backend.Class]classText{
	// On Read, Update and Delete: the proxy existed. A create's NotFound is createAdvice's.
	backend.ClassNotFound: {"Egress proxy not found",
		"The object no longer exists on the backend; it may have been deleted outside Terraform. " +
			"Run terraform apply to create it again, or remove it from the configuration."},
	backend.ClassQuota: {"Egress proxy backend limit reached",
		"The backend has no room for this request (quota, memory, disk or instance limit). It was not retried. " +
			"Free capacity or raise the limit, or ask for a smaller proxy, then apply again."},
	backend.ClassTransient: {"Egress proxy backend temporarily unavailable",
		"The request failed in a way that may pass later, and was retried until the timeout ended. " +
			"Check that the backend is reachable and healthy (the egress_backends data source reports it), " +
			"then apply again, or raise the timeouts block."},
	backend.ClassPermanent: {"Egress proxy request refused by the backend",
		"The request cannot succeed as made. It was not retried. Correct the configuration or the backend " +
			"(permissions, names, existing objects) as the backend error says, then apply again."},
	backend.ClassUnclassified: {"Unexpected egress proxy backend error",
		"The backend returned an error the provider does not recognise; it was retried until the timeout ended. " +
			"If it persists, report it to the provider's maintainers with this message."},
}

// createAdvice replaces classAdvice where a class means something else for a create. NotFound there is never
// the proxy deleted outside Terraform, since it is being made: what it was to be made in is missing. Backends
// turn the parents they know (namespace, zone, network, subnetwork, pool) into Permanent errors that name
// them; this covers whatever still arrives as NotFound.
var createAdvice = map[backend.Class]classText{
	backend.ClassNotFound: {"Egress proxy placement not found",
		"Something the proxy is placed in or refers to (a namespace, zone, network, subnetwork, storage pool, base volume " +
			"or image, as the backend error names) does not exist on the backend. It was not retried. " +
			"Create it first, or correct the placement, then apply again."},
}

// adviceFor is what the user reads about an error of class in operation.
func adviceFor(operation string, class backend.Class) classText {
	if a, ok := createAdvice[class]; ok && operation == "create" {
		return a
	}
	return classAdvice[class]
}

// backendErrorDiagnostic explains a failed backend operation on object: what happened, on which object,
// the error class and what to do, each said once.
func backendErrorDiagnostic(operation, object string, err error) diag.Diagnostic {
	class := backend.ClassOf(err)
	a := adviceFor(operation, class)
	if advice := backend.AdviceOf(err); advice != "" {
		a.advice = advice
	}
	object, message := objectAndMessage(object, err)
	detail := fmt.Sprintf("Could not %s %s.\n\nError class: %s\nBackend error: %s\n\n%s", operation, object, class, message, a.advice)
	var notConfigured *backend.NotConfiguredError
	if errors.As(err, &notConfigured) {
		return diag.NewErrorDiagnostic("Backend not configured", fmt.Sprintf("Could not %s %s: %s.", operation, object, message))
	}
	if errors.Is(err, context.Canceled) {
		return diag.NewErrorDiagnostic("Egress proxy operation interrupted", fmt.Sprintf(
			"Could not %s %s: the operation was cancelled (Ctrl-C, or the CLI stopping the provider) before it finished.\n\n"+
				"Error class: %s\nBackend error: %s\n\n"+
				"Run terraform apply again to finish. A proxy that was already created is in the state, or is adopted by the next create because creates are idempotent by name.",
			operation, object, class, message))
	}
	return diag.NewErrorDiagnostic(a.summary, detail)
}

// objectAndMessage names the failed object by the provider's name for it and, beside it, as the backend knows
// it (a libvirt domain, a Deployment), and strips the class and object the classified error's text begins
// with, since the diagnostic states both on lines of their own.
func objectAndMessage(object string, err error) (string, string) {
	message := err.Error()
	var e *backend.Error
	if !errors.As(err, &e) {
		return object, message
	}
	prefix := strings.ToLower(e.Class.String()) + ": "
	if e.Object != "" {
		prefix += e.Object + ": "
		if e.Object != object {
			object = fmt.Sprintf("%s (%s)", object, e.Object)
		}
	}
	return object, strings.Replace(message, prefix, "", 1)
}

// taintedDetail is added when Create made an object that did not become ready: it is saved so Terraform
// replaces it on the next apply rather than leaking it.
const taintedDetail = "The proxy was created on the backend but did not become ready. It is saved in the state as tainted: " +
	"the next terraform apply deletes and replaces it, and terraform destroy removes it."
