// Package install registers every API group shepherd uses into a scheme: the
// built-in Kubernetes types, shepherd's own (shepherd.dev:
// api/shepherd/v1alpha1), apiextensions.k8s.io/v1 (the frameworks' CRDs,
// watched by integrations), Trainer's TrainJob (api/trainer), JobSet's
// upstream types (sigs.k8s.io/jobset), and
// OpenReports (openreports.io), whose Reports the audit writes when a
// cluster serves them.
//
// Trainer's runtimes and Grove's kinds are not in it: shepherd reads them as
// the cluster serves them, since a typed decode would drop the seed fields
// their knobs read (integrations/trainer, integrations/grove).
package install

import (
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// AddToScheme adds every group shepherd knows to s.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		trainerv1alpha1.AddToScheme,
		jobsetv1alpha2.AddToScheme,
		shepherdv1alpha1.AddToScheme,
		openreportsv1alpha1.Install,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// NewScheme returns a scheme with every group shepherd knows.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(AddToScheme(s))
	return s
}
