package attribute_validator //nolint:revive

import "errors"

var (
	errNegative = errors.New("must not be negative")
	errEmpty    = errors.New("must not be empty")
)
