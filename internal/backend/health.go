package backend

// Machine-readable reasons of a Health, defined once here: backends report them, and the egress_backends data
// source lists them in its docs. Reason carries only the word; what a person reads goes in Details, under
// DetailMessage.
const (
	// HealthHealthy: the target answered and everything a proxy needs there is in place.
	HealthHealthy = "Healthy"
	// HealthUnreachable: the target could not be reached (no daemon or API answering, a refused or silent
	// connection, a missing socket).
	HealthUnreachable = "Unreachable"
	// HealthUnauthorized: the target answered but refused the provider's credentials or their permissions.
	HealthUnauthorized = "Unauthorized"
	// HealthNotFound: something the configuration names on the target does not exist (a storage pool, a
	// network, a base volume, a namespace).
	HealthNotFound = "NotFound"
	// HealthDegraded: reachable and present, but not usable as it is (a pool or network not started, a pool
	// with no space left).
	HealthDegraded = "Degraded"
	// HealthError: any other failure; DetailMessage says which.
	HealthError = "Error"
	// HealthBackendUnavailable: the backend itself could not be set up (its provider configuration is wrong).
	HealthBackendUnavailable = "BackendUnavailable"
	// HealthNoHealthCheck: the backend offers no health check; it is taken as healthy.
	HealthNoHealthCheck = "NoHealthCheck"
)

// HealthReasons lists every reason, for validators and documentation.
var HealthReasons = []string{
	HealthHealthy, HealthUnreachable, HealthUnauthorized, HealthNotFound, HealthDegraded, HealthError,
	HealthBackendUnavailable, HealthNoHealthCheck,
}

// DetailMessage is the Details key of the human-readable text of an unhealthy target.
const DetailMessage = "message"
