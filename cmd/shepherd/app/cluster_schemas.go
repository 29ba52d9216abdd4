package app

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
)

// clusterClient connects to the cluster of a kubeconfig (path, or the
// default loading rules — $KUBECONFIG, ~/.kube/config — when empty).
func clusterClient(kubeconfig string, timeout time.Duration) (client.Client, *rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	restCfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	restCfg.Timeout = timeout
	scheme := install.NewScheme()
	c, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", restCfg.Host, err)
	}
	return c, restCfg, nil
}

// servedSchemas reads the CRDs of the frameworks a cluster serves (the
// established ones) and indexes them, with each kind's storage version:
// what rules are type-checked against there.
func servedSchemas(ctx context.Context, c client.Reader, host string) (*celrules.Schemas, map[schema.GroupKind]string, error) {
	var crdList apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crdList); err != nil {
		return nil, nil, fmt.Errorf("reading the CRDs of %s (the rules are type-checked against them; needs list on customresourcedefinitions): %w", host, err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	storage := map[schema.GroupKind]string{}
	for i := range crdList.Items {
		crd := &crdList.Items[i]
		if _, ok := integrations.Of(crd.Spec.Group); !ok || !integrations.Established(crd) {
			continue
		}
		crds = append(crds, crd)
		for _, v := range crd.Spec.Versions {
			if v.Storage && v.Served {
				storage[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = v.Name
			}
		}
	}
	s, err := celrules.NewSchemas(crds, "the CRDs "+host+" serves")
	return s, storage, err
}
