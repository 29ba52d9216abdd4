package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The identity `shepherd serve` runs as in every suite (issue 29): the
// ServiceAccount deploy/ ships, in the namespace it installs into, bound by
// exactly the RBAC of deploy/default (deploy/native in the native admission
// mode). A verb the shipped RBAC lacks fails the suite that needs it, as it
// would fail the reconciler on a real cluster.
const (
	ShepherdNamespace      = "shepherd-system"
	ShepherdServiceAccount = "shepherd"
)

// ShepherdUser is the user name the apiserver gives shepherd's
// ServiceAccount (and the audit log records).
var ShepherdUser = "system:serviceaccount:" + ShepherdNamespace + ":" + ShepherdServiceAccount

// RBAC variants of deploy/: the directory each is built from.
const (
	RBACDefault = "default"
	RBACNative  = "native"
)

// rbacState is what a cluster has installed of the shipped RBAC.
type rbacState struct {
	mu sync.Mutex
	// installed variants.
	installed map[string]bool
	// kubeconfigs of the ServiceAccount's identity, by variant.
	kubeconfigs map[string]string
	dir         string
}

var rbacStates sync.Map // *Cluster -> *rbacState

func (c *Cluster) rbac() *rbacState {
	s, _ := rbacStates.LoadOrStore(c, &rbacState{installed: map[string]bool{}, kubeconfigs: map[string]string{}})
	return s.(*rbacState)
}

// shippedRBAC caches each variant's build: every serve and replica a suite
// starts needs it, and the files do not change while it runs.
var shippedRBAC sync.Map // variant -> func() ([]*unstructured.Unstructured, error)

// ShippedRBAC builds deploy/<variant> with Kustomize (once per process)
// and returns copies of its RBAC objects and the Namespace and
// ServiceAccount they bind (nothing else: no Deployment, no webhook
// configuration, no CRD).
func ShippedRBAC(variant string) ([]*unstructured.Unstructured, error) {
	build, _ := shippedRBAC.LoadOrStore(variant, sync.OnceValues(func() ([]*unstructured.Unstructured, error) {
		return buildShippedRBAC(variant)
	}))
	objs, err := build.(func() ([]*unstructured.Unstructured, error))()
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out, nil
}

func buildShippedRBAC(variant string) ([]*unstructured.Unstructured, error) {
	dir := filepath.Join(RepoRoot(), "deploy", variant)
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		switch r.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	return out, nil
}

// installRBAC creates deploy/<variant>'s RBAC (ShippedRBAC) once per
// cluster; objects already there (another variant's) are left as they are.
func (c *Cluster) installRBAC(ctx context.Context, variant string) error {
	s := c.rbac()
	if s.installed[variant] {
		return nil
	}
	objs, err := ShippedRBAC(variant)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("installing shipped RBAC %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	s.installed[variant] = true
	return nil
}

// rbacVariant is the variant a serve command line needs.
func rbacVariant(args []string) string {
	if slices.Contains(args, "--admission-mode=native") {
		return RBACNative
	}
	return RBACDefault
}

// ShepherdKubeconfig installs the shipped RBAC of variant (once) and returns
// a kubeconfig, written once per cluster, for shepherd's ServiceAccount: a
// client certificate for user ShepherdUser in the groups the apiserver
// gives a ServiceAccount, so the shipped bindings apply to it as they do to
// the ServiceAccount's token in a pod.
func (c *Cluster) ShepherdKubeconfig(variant string) (string, error) {
	s := c.rbac()
	s.mu.Lock()
	defer s.mu.Unlock()
	if kc := s.kubeconfigs[variant]; kc != "" {
		return kc, nil
	}
	if err := c.installRBAC(context.Background(), variant); err != nil {
		return "", err
	}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "shepherd-rbac-")
		if err != nil {
			return "", err
		}
		s.dir = dir
	}
	kc, err := c.writeKubeconfig(filepath.Join(s.dir, variant+".kubeconfig"), envtest.User{Name: ShepherdUser, Groups: serviceAccountGroups(ShepherdNamespace)})
	if err != nil {
		return "", err
	}
	s.kubeconfigs[variant] = kc
	return kc, nil
}

func serviceAccountGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// grantLeaseNamespace copies the shipped namespaced Roles and their
// RoleBindings (to the ServiceAccount, unchanged) into ns: what shepherd
// installed in ns would have, for a suite that keeps each test's Lease in a
// namespace of its own (--leader-election-namespace).
func (c *Cluster) grantLeaseNamespace(ctx context.Context, variant, ns string) error {
	objs, err := ShippedRBAC(variant)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if k := o.GetKind(); k != "Role" && k != "RoleBinding" {
			continue
		}
		cp := o.DeepCopy()
		cp.SetNamespace(ns)
		cp.SetResourceVersion("")
		if err := c.Client.Create(ctx, cp); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("copying the shipped %s %s into %s: %w", o.GetKind(), o.GetName(), ns, err)
		}
	}
	return nil
}

// leaseNamespace is the --leader-election-namespace of a command line, or "".
func leaseNamespace(args []string) string {
	ns := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--leader-election-namespace="); ok {
			ns = v
		}
	}
	return ns
}

// KubeconfigAsShepherd is ShepherdKubeconfig for a user of its own (so
// that an audit log tells two replicas apart) whose Lease lives in
// leaseNamespace: the user is bound to the shipped ClusterRoles as the
// ServiceAccount is, and to copies of the shipped namespaced Roles (the same
// rules) in leaseNamespace — what installing shepherd there would grant. It
// writes dir/<user>.kubeconfig.
func (c *Cluster) KubeconfigAsShepherd(dir, user, leaseNamespace, variant string) (string, error) {
	ctx := context.Background()
	s := c.rbac()
	s.mu.Lock()
	err := c.installRBAC(ctx, variant)
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	objs, err := ShippedRBAC(variant)
	if err != nil {
		return "", err
	}
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
	suffix := "-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-", ":", "-").Replace(user))
	for _, o := range objs {
		var obj client.Object
		switch o.GetKind() {
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b); err != nil {
				return "", err
			}
			b.ObjectMeta = metav1.ObjectMeta{Name: b.Name + suffix}
			b.Subjects = []rbacv1.Subject{subject}
			obj = b
		case "Role":
			r := &rbacv1.Role{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, r); err != nil {
				return "", err
			}
			r.ObjectMeta = metav1.ObjectMeta{Name: r.Name}
			r.Namespace = leaseNamespace
			obj = r
		case "RoleBinding":
			b := &rbacv1.RoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b); err != nil {
				return "", err
			}
			b.ObjectMeta = metav1.ObjectMeta{Name: b.Name + suffix}
			b.Namespace = leaseNamespace
			b.Subjects = []rbacv1.Subject{subject}
			obj = b
		default:
			continue
		}
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("binding the shipped RBAC to %s: %s: %w", user, obj.GetName(), err)
		}
	}
	return c.writeKubeconfig(filepath.Join(dir, user+".kubeconfig"), envtest.User{Name: user, Groups: []string{"system:authenticated"}})
}
