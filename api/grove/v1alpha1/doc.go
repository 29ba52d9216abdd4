// Package v1alpha1 is Grove's published grove.io/v1alpha1 API as far as
// shepherd and its tests use it: PodCliqueSet, PodClique and
// PodCliqueScalingGroup, re-typed by hand from Grove's published API at
// github.com/ai-dynamo/grove commit fcc3b3bbbc5e6a2a797cd080bdbc6983b1ccec24
// (operator/api/core/v1alpha1 and its generated CRDs), because Grove's Go
// modules are not on the module proxy. It is shepherd's one Grove type set.
//
// It has no field Grove's API lacks. The fields of the seed designs
// (workloadType, trainingSpec, a scaling group's terminationDelay, the old
// Training status, status.wasAvailable, status.rollingUpdateProgress) are
// read by package integrations/grove from the objects as the cluster serves
// them, field or carrier annotation. So the types are plain structs: no
// deepcopy, not runtime.Objects, in no scheme. Grove objects are read and
// written unstructured (integrations/grove.Set, Clique and ScalingGroup pair
// both views), and no typed read can drop a seed field.
//
// The markers also render integrations/pinned/crds (`make manifests`): CRDs
// that store what a real Grove cluster stores — the same field names and
// nesting, defaults, enums, CEL rules, subresources and pruning. shepherd's
// deploy manifests never install them. When Grove's API changes, re-read
// the new commit and update these types and the commit named above.
//
// +kubebuilder:object:generate=false
// +groupName=grove.io
package v1alpha1
