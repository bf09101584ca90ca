package attribute_validator

import "errors"

var (
	errNegative = errors.New("must not be negative")
	errEmpty    = errors.New("must not be empty")
)
