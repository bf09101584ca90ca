package attribute_validator

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// MAC accepts a unicast Ethernet address written as six colon-separated hex pairs.
func MAC() validator.String {
	return stringFunc{"MAC address", func(s string) error {
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 || len(s) != 17 {
			return fmt.Errorf("%q is not a MAC address such as 52:54:00:12:34:56", s)
		}
		if hw[0]&1 == 1 {
			return fmt.Errorf("%q is a multicast address; an interface needs a unicast one", s)
		}
		return nil
	}}
}

// IPv4 accepts a plain IPv4 address.
func IPv4() validator.String {
	return stringFunc{"IPv4 address", func(s string) error {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address such as 192.168.122.10", s)
		}
		return nil
	}}
}
