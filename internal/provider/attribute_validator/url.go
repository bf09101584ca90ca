package attribute_validator

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// URLWithScheme accepts an absolute URL with a host and one of schemes, such as an API endpoint.
func URLWithScheme(schemes ...string) validator.String {
	return stringFunc{"URL", func(s string) error {
		u, err := url.Parse(s)
		if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" {
			return fmt.Errorf("%q must be an %s URL, such as %s://host.example/", s, strings.Join(schemes, " or "), schemes[len(schemes)-1])
		}
		return nil
	}}
}
