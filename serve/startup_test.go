package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/webhook/policies"
)

// TestStripManagedFields: the cache holds objects without managedFields,
// except the kinds whose managedFields a decision reads (the runtimes'
// TTL, the Grove gang's MinAvailableBreached owner).
func TestStripManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	meta := func() metav1.ObjectMeta { return metav1.ObjectMeta{Name: "x", ManagedFields: managed} }
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload"}}
	u.SetManagedFields(managed)
	served := func(o *unstructured.Unstructured) *unstructured.Unstructured {
		o.SetManagedFields(managed)
		return o
	}
	for _, tc := range []struct {
		obj  metav1.Object
		keep bool
	}{
		{&trainerv1alpha1.TrainJob{ObjectMeta: meta()}, false},
		{&corev1.Pod{ObjectMeta: meta()}, false},
		{served(grove.NewObject(api.KindPodCliqueSet)), false},
		{u, false},
		{served(trainer.NewRuntime("TrainingRuntime")), true},
		{served(trainer.NewRuntime("ClusterTrainingRuntime")), true},
		{served(grove.NewObject(api.KindPodClique)), true},
		{served(grove.NewObject(api.KindPodCliqueScalingGroup)), true},
	} {
		out, err := stripManagedFields()(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		if kept := len(out.(metav1.Object).GetManagedFields()) > 0; kept != tc.keep {
			t.Errorf("%T: managedFields kept = %v, want %v", tc.obj, kept, tc.keep)
		}
	}
}

// pagedCRDs is a client.Reader serving CRDs a page at a time, as the
// apiserver does with limit and continue.
type pagedCRDs struct {
	client.Reader
	items []apiextensionsv1.CustomResourceDefinition
	pages int
	limit int64
}

func (p *pagedCRDs) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	p.pages++
	p.limit = o.Limit
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	to := min(from+int(o.Limit), len(p.items))
	if o.Limit == 0 {
		to = len(p.items)
	}
	l := list.(*apiextensionsv1.CustomResourceDefinitionList)
	l.Items = slices.Clone(p.items[from:to])
	if to < len(p.items) {
		l.Continue = strconv.Itoa(to)
	}
	return nil
}

// TestFrameworkCRDsListsAPageAtATime: serve's first read of the CRDs goes
// page by page (a cluster may serve hundreds) and keeps the frameworks'
// established ones only, from every page.
func TestFrameworkCRDsListsAPageAtATime(t *testing.T) {
	established := apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}}
	r := &pagedCRDs{}
	for i := range 120 {
		r.items = append(r.items, apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("things%03d.example.com", i)},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com"}, Status: established})
	}
	// One of the frameworks' in the middle of the first page, one on the
	// last, and one not established.
	r.items[10] = apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "trainjobs.trainer.kubeflow.org"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "trainer.kubeflow.org"}, Status: established}
	r.items[110] = apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "jobsets.jobset.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "jobset.x-k8s.io"}, Status: established}
	r.items[60] = apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "podcliquesets.grove.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "grove.io"}}
	crds, err := frameworkCRDs(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"jobsets.jobset.x-k8s.io", "trainjobs.trainer.kubeflow.org"}, names); diff != "" {
		t.Errorf("CRDs kept (-want +got):\n%s", diff)
	}
	if r.pages != 3 || r.limit != crdPage {
		t.Errorf("%d list requests of limit %d, want 3 of %d", r.pages, r.limit, crdPage)
	}
}

// failingReader fails every read, as an apiserver that is not reachable
// (or forbids the list) does.
type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("connection refused")
}

// TestInitialSchemas: serve starts on the CRDs the cluster serves, the
// ones followSchemas' first pass then keeps (same source, Of the same
// CRDs); when they cannot be listed, on the pinned upstream schemas,
// which that pass replaces.
func TestInitialSchemas(t *testing.T) {
	crds, err := pinned.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	r := &pagedCRDs{}
	for i, c := range crds {
		c.UID = types.UID(fmt.Sprintf("uid-%d", i))
		c.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		r.items = append(r.items, *c)
	}
	s, err := initialSchemas(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != policies.ServedSchemasSource || !s.Of(integrations.FrameworkCRDs(r.items)) {
		t.Errorf("initial schemas from %q, Of the served CRDs %v; want the served ones", s.Source, s.Of(integrations.FrameworkCRDs(r.items)))
	}
	if got := s.Resource(schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainJob"}); got != "trainjobs" {
		t.Errorf("TrainJob's resource %q, want trainjobs", got)
	}

	s, err = initialSchemas(context.Background(), failingReader{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Source, "pinned upstream CRDs") {
		t.Errorf("without the cluster's CRDs, schemas from %q; want the pinned upstream ones", s.Source)
	}
}
