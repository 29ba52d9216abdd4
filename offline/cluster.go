package offline

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
)

// Connect connects to the cluster of a kubeconfig (path, or the
// default loading rules — $KUBECONFIG, ~/.kube/config — when empty).
func Connect(kubeconfig string, timeout time.Duration) (client.Client, *rest.Config, error) {
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

// ServedSchemas reads the CRDs of the frameworks a cluster serves (the
// established ones) and indexes them, with each kind's storage version:
// what rules are type-checked against there.
func ServedSchemas(ctx context.Context, c client.Reader, host string) (*celrules.Schemas, map[schema.GroupKind]string, error) {
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

// Cluster is what ReadCluster read.
type Cluster struct {
	// Objects are the stored objects of the kinds shepherd admits, and
	// the namespaces.
	Objects []*unstructured.Unstructured
	// Schemas are those of the frameworks' CRDs the cluster serves.
	Schemas *celrules.Schemas
	// WorkloadAPI: the cluster serves Workloads.
	WorkloadAPI bool
}

// ReadCluster reads, once, everything the rules and lookups look at on a
// cluster: the CRDs of the frameworks (the schemas the policies are
// type-checked against), every object of the kinds shepherd admits (in
// namespace, when one is given) and the namespaces, and whether it serves
// the Workload API. Lists are paged; nothing is watched.
func ReadCluster(ctx context.Context, c client.Client, restCfg *rest.Config, namespace string) (*Cluster, error) {
	schemas, storage, err := ServedSchemas(ctx, c, restCfg.Host)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured

	for _, sk := range celrules.WebhookKinds {
		v, ok := storage[sk.GroupKind]
		if !ok {
			continue // the framework is not installed: nothing stored
		}
		items, err := listAll(ctx, c, sk.GroupKind.WithVersion(v), namespace)
		if err != nil {
			return nil, fmt.Errorf("listing %s on %s: %w", sk.Resource, restCfg.Host, err)
		}
		objs = append(objs, items...)
	}
	// ClusterTrainingRuntimes are cluster-scoped, and lookups need them
	// even under -n; listAll ignores the namespace for them.

	dc, err := discovery.NewDiscoveryClientForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	found, err := integrations.DiscoverWorkloadAPI(dc)
	if err != nil {
		return nil, err
	}
	var nsList corev1.NamespaceList
	if err := c.List(ctx, &nsList); err != nil && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("listing namespaces on %s: %w", restCfg.Host, err)
	}
	for i := range nsList.Items {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&nsList.Items[i])
		if err != nil {
			return nil, err
		}
		ns := &unstructured.Unstructured{Object: u}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		objs = append(objs, ns)
	}
	return &Cluster{Objects: objs, Schemas: schemas, WorkloadAPI: found.Served}, nil
}

// listAll lists every object of gvk (in namespace, if it is namespaced and
// one is given), a page of 500 at a time.
func listAll(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, namespace string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	opts := []client.ListOption{client.Limit(500)}
	if namespace != "" && gvk.Kind != api.KindClusterTrainingRuntime {
		opts = append(opts, client.InNamespace(namespace))
	}
	cont := ""
	for {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, &list, append(opts, client.Continue(cont))...); err != nil {
			return nil, err
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		if cont = list.GetContinue(); cont == "" {
			return out, nil
		}
	}
}
