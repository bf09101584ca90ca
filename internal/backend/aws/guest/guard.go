package guest

import (
	"slices"
	"sync"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// The EC2 guest's second check of a config, after its MAC (ConfigMAC): whatever wrote it, the agent
// installs only what the renderer could have written. squid.conf may hold only the directives
// proxyconf.RenderSquidConf writes; those whose lines never depend on the settings (the helper program and the
// password file of auth_param, the log and pid files, the user) only as it writes them; files named in
// quotes only the own-addresses file; ACL types and listening-port options only those it uses. A leaked
// config key, or a bug in the MAC, still cannot start a program (every *_program, external_acl_type,
// a logfile daemon) nor pull in another file (include). The backstop must replace the one table it owns
// and hold its chains, so an empty or foreign ruleset cannot open the way to the metadata server.

// guard is the check, as agent.json carries it (key "guard"): proxyconf.Vocabulary in the agent's names. The
// agent applies it in guard_squid_conf and guard_backstop.
type guard struct {
	// Directives are every directive the renderer writes.
	Directives []string `json:"directives"`
	// Pinned maps a directive whose lines do not depend on the settings to the only lines it may have.
	Pinned map[string][]string `json:"pinned"`
	// ACLTypes are the acl types the renderer uses.
	ACLTypes []string `json:"acl_types"`
	// PortOptions are the options http_port and https_port may carry after their address.
	PortOptions []string `json:"port_options"`
	// QuotedFiles are the only values a config may give in double quotes (which Squid reads as a file).
	QuotedFiles []string `json:"quoted_files"`
	// BackstopTable is the table the backstop replaces; BackstopLines are lines it must hold, each whole.
	BackstopTable string   `json:"backstop_table"`
	BackstopLines []string `json:"backstop_lines"`
}

// guardOnce learns the guard from the renderer itself (proxyconf.VocabularyOf), with the guest's options
// without metrics and with them (the cache manager's port, renderOptions), so the two cannot drift apart.
var guardOnce = sync.OnceValue(func() guard {
	return guard(mergeVocabularies(proxyconf.VocabularyOf(vmguest.RenderOptions()), proxyconf.VocabularyOf(renderOptions(withMetrics))))
})

// withMetrics stands for any settings with metrics: renderOptions reads only whether there are.
var withMetrics = proxyconf.Settings{Metrics: &proxyconf.MetricsSettings{}}

// mergeVocabularies is what either of a and b admits: their directives, ACL types and port options; a
// directive pinned in both is pinned to the lines of either, one pinned in a single one is left free, as
// the other renders it with lines that depend on the settings.
func mergeVocabularies(a, b proxyconf.Vocabulary) proxyconf.Vocabulary {
	union := func(x, y []string) []string {
		out := slices.Clone(x)
		for _, e := range y {
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
		slices.Sort(out)
		return out
	}
	out := a
	out.Directives, out.ACLTypes, out.PortOptions = union(a.Directives, b.Directives), union(a.ACLTypes, b.ACLTypes), union(a.PortOptions, b.PortOptions)
	out.QuotedFiles = union(a.QuotedFiles, b.QuotedFiles)
	out.Pinned = map[string][]string{}
	for d, lines := range a.Pinned {
		if other, ok := b.Pinned[d]; ok {
			out.Pinned[d] = union(lines, other)
		} else if !slices.Contains(b.Directives, d) {
			out.Pinned[d] = lines
		}
	}
	for d, lines := range b.Pinned {
		if _, ok := a.Pinned[d]; !ok && !slices.Contains(a.Directives, d) {
			out.Pinned[d] = lines
		}
	}
	return out
}
