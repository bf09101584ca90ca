package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The provider block's cluster settings reach the kubernetes backend; building it connects nothing, so a
// cluster that does not exist is no error yet.
func TestKubernetesFactoryBuildsWithoutConnecting(t *testing.T) {
	t.Parallel()
	namespaces := types.ListValueMust(types.StringType, nil)
	model := &kubernetesProviderModel{Clusters: map[string]kubernetesClusterModel{
		"lab": {ConfigPath: types.StringNull(), ConfigContext: types.StringNull(), kubernetesClusterExtra: kubernetesClusterExtra{
			Host: types.StringValue("https://127.0.0.1:1"), Token: types.StringValue("t"), Namespaces: namespaces,
		}},
	}}
	b, err := kubernetesFactory(model)(context.Background())
	if err != nil || b == nil {
		t.Fatalf("kubernetesFactory = %v, %v; want a backend that connects on first use", b, err)
	}
}
