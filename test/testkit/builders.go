package testkit

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api"
)

// Builder builds one object of a kind, the way Kueue's testing wrappers
// do: a constructor per kind with the fields every test needs, then
// setters; Obj returns the object. Objects are unstructured, so one
// builder serves the seed-shaped and the upstream CRDs alike.
type Builder struct{ u *unstructured.Unstructured }

// Object starts an object of apiVersion and kind named ns/name (ns "" for
// a cluster-scoped one, name "" to set it later).
func Object(apiVersion, kind, ns, name string) *Builder {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{}}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	if name != "" {
		u.SetName(name)
	}
	return &Builder{u: u}
}

// TrainJob is a TrainJob on ClusterTrainingRuntime runtime with numNodes
// nodes (0 leaves numNodes to the runtime).
func TrainJob(ns, name, runtime string, numNodes int64) *Builder {
	b := Object(trainerAPIVersion, api.KindTrainJob, ns, name).
		Set(map[string]any{"apiGroup": api.TrainerGroup, "kind": api.KindClusterTrainingRuntime, "name": runtime}, "spec", "runtimeRef")
	if numNodes != 0 {
		b.Set(numNodes, "spec", "trainer", "numNodes")
	}
	return b
}

// ClusterTrainingRuntime is a ClusterTrainingRuntime whose JobSet has one
// replicatedJob, "node", of one container running image.
func ClusterTrainingRuntime(name, image string) *Builder {
	return runtimeObject(api.KindClusterTrainingRuntime, "", name, image)
}

// TrainingRuntime is ClusterTrainingRuntime's namespaced twin.
func TrainingRuntime(ns, name, image string) *Builder {
	return runtimeObject(api.KindTrainingRuntime, ns, name, image)
}

func runtimeObject(kind, ns, name, image string) *Builder {
	return Object(trainerAPIVersion, kind, ns, name).Set([]any{map[string]any{
		"name": "node",
		"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "node", "image": image}},
		}}}},
	}}, "spec", "template", "spec", "replicatedJobs")
}

const trainerAPIVersion = api.TrainerGroup + "/v1alpha1"

// PodCliqueSet is a one-replica PodCliqueSet of the given clique templates
// (Clique).
func PodCliqueSet(ns, name string, cliques ...map[string]any) *Builder {
	list := make([]any, 0, len(cliques))
	for _, c := range cliques {
		list = append(list, c)
	}
	return Object(api.GroveGroup+"/v1alpha1", api.KindPodCliqueSet, ns, name).
		Set(int64(1), "spec", "replicas").
		Set(list, "spec", "template", "cliques")
}

// Clique is a clique template for PodCliqueSet: replicas pods of one
// container running image, role name as the clique's name, with spec's
// other fields (minAvailable, startsAfter, ...) set from spec.
func Clique(name string, replicas int64, image string, spec map[string]any) map[string]any {
	s := map[string]any{"roleName": name, "replicas": replicas,
		"podSpec": map[string]any{"containers": []any{map[string]any{"name": name, "image": image}}}}
	for k, v := range spec {
		if i, ok := v.(int); ok {
			v = int64(i)
		}
		s[k] = v
	}
	return map[string]any{"name": name, "spec": s}
}

// JobSet is a JobSet of one replicatedJob, "train", whose pods run one
// container of image and are not restarted in place.
func JobSet(ns, name, image string) *Builder {
	return Object(api.JobSetGroup+"/v1alpha2", api.KindJobSet, ns, name).Set([]any{map[string]any{
		"name": "train",
		"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never",
			"containers":    []any{map[string]any{"name": "train", "image": image}},
		}}}},
	}}, "spec", "replicatedJobs")
}

// RuntimeJobs replaces a runtime's replicatedJobs with jobs (JobSet's own
// Go type, converted to what the apiserver serves).
func (b *Builder) RuntimeJobs(jobs ...jobsetv1alpha2.ReplicatedJob) *Builder {
	list := make([]any, 0, len(jobs))
	for i := range jobs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&jobs[i])
		if err != nil {
			panic(fmt.Sprintf("testkit: replicatedJob %s: %v", jobs[i].Name, err))
		}
		list = append(list, m)
	}
	return b.Set(list, "spec", "template", "spec", "replicatedJobs")
}

// GenerateName has the apiserver name the object, from prefix.
func (b *Builder) GenerateName(prefix string) *Builder {
	b.u.SetName("")
	b.u.SetGenerateName(prefix)
	return b
}

// Set sets the field at path to v (a map, slice or scalar as
// unstructured holds them; int is stored as int64).
func (b *Builder) Set(v any, path ...string) *Builder {
	if i, ok := v.(int); ok {
		v = int64(i)
	}
	if err := unstructured.SetNestedField(b.u.Object, v, path...); err != nil {
		panic(fmt.Sprintf("testkit: setting %s: %v", strings.Join(path, "."), err))
	}
	return b
}

// Merge sets each of fields under the map at path (creating it), leaving
// the fields it does not name.
func (b *Builder) Merge(fields map[string]any, path ...string) *Builder {
	for k, v := range fields {
		b.Set(v, append(append([]string{}, path...), k)...)
	}
	return b
}

// Image sets a TrainJob's trainer image.
func (b *Builder) Image(image string) *Builder { return b.Set(image, "spec", "trainer", "image") }

// Labels adds labels given as "key=value".
func (b *Builder) Labels(kv ...string) *Builder {
	m := b.u.GetLabels()
	if m == nil {
		m = map[string]string{}
	}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	b.u.SetLabels(m)
	return b
}

// Annotations adds annotations given as "key=value".
func (b *Builder) Annotations(kv ...string) *Builder {
	m := b.u.GetAnnotations()
	if m == nil {
		m = map[string]string{}
	}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	b.u.SetAnnotations(m)
	return b
}

// Obj returns a copy of the object built so far.
func (b *Builder) Obj() *unstructured.Unstructured { return b.u.DeepCopy() }

// Map returns a copy of the object as unstructured holds it.
func (b *Builder) Map() map[string]any { return b.Obj().Object }

// JSON is the object as a request body carries it.
func (b *Builder) JSON() []byte {
	out, err := b.u.MarshalJSON()
	if err != nil {
		panic(fmt.Sprintf("testkit: %v", err))
	}
	return out
}

// Into returns the object built by b as a T, a Go type of its kind (a
// TrainJob as trainerv1alpha1.TrainJob): the one builder serves the tests
// of typed code too.
func Into[T any](b *Builder) *T {
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(b.u.Object, out); err != nil {
		panic(fmt.Sprintf("testkit: %s as %T: %v", b.u.GetKind(), out, err))
	}
	return out
}

// UID sets metadata.uid, as the apiserver would.
func (b *Builder) UID(uid string) *Builder { return b.Set(uid, "metadata", "uid") }

// YAML is the object as a manifest.
func (b *Builder) YAML() string {
	out, err := yaml.Marshal(b.u.Object)
	if err != nil {
		panic(fmt.Sprintf("testkit: %v", err))
	}
	return string(out)
}

// JobTemplate is the Job of a runtime's or a JobSet's replicated job
// "node": one busybox container that is never restarted.
func JobTemplate() batchv1.JobTemplateSpec {
	return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "node", Image: "busybox"}},
	}}}}
}
