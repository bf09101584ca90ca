//go:build generate

// Package tools pins the code generators this repository runs through `go run`, so their versions live in this
// module's go.mod and not in the provider's.
package tools

import (
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)
