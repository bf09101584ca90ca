package aws

import (
	"fmt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// maxAdvancedParameter is the largest value SSM holds in one parameter, of the Advanced tier ("Managing
// parameter tiers": 8 KB).
const maxAdvancedParameter = 8192

// CheckParameterSizes renders the parameters a proxy of settings s and options o would write and refuses any
// that no tier of SSM can hold, naming it and its size: what a plan can tell before Create or Reconfigure
// meets SSM's ValidationException. The config's key and MAC have fixed sizes, so a throwaway key measures
// them as well as the real one.
func CheckParameterSizes(name string, s proxyconf.Settings, o Options) error {
	values, ok := renderedValues(name, s, o)
	if !ok {
		return nil // not this check's to report: the settings' own validation says what is wrong
	}
	for _, v := range values {
		if len(v[1]) > maxAdvancedParameter {
			return fmt.Errorf("the proxy's %s parameter would hold %d characters, and an SSM parameter holds at most %d (Advanced tier)", v[0], len(v[1]), maxAdvancedParameter)
		}
	}
	return nil
}

// renderedValues are the config, settings and secrets parameters' names and values as Create would write
// them; false when the settings do not render.
func renderedValues(name string, s proxyconf.Settings, o Options) ([][2]string, bool) {
	var p parameters
	var err error
	p.config, p.secrets, p.configID, err = guest.RenderParameters(s, guest.ParameterPath(name, ""), make([]byte, guest.ConfigKeyBytes))
	if err != nil {
		return nil, false
	}
	stored, err := jsonString(newStoredSpec(s, o, p))
	if err != nil {
		return nil, false
	}
	return [][2]string{{guest.ParameterConfig, string(p.config)}, {guest.ParameterSettings, stored}, {guest.ParameterSecrets, string(p.secrets)}}, true
}
