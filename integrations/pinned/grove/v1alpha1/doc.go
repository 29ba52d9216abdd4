// Package v1alpha1 is a test-only, pinned schema of Grove's grove.io/v1alpha1
// API: PodCliqueSet, PodClique and PodCliqueScalingGroup, re-typed by hand
// from Grove's published API at github.com/ai-dynamo/grove commit
// fcc3b3bbbc5e6a2a797cd080bdbc6983b1ccec24 (operator/api/core/v1alpha1 and
// its generated CRDs), because Grove's Go modules are not on the module proxy.
//
// The package exists only so controller-gen can render CRDs into
// integrations/pinned/crds that store what a real Grove cluster stores: the
// same field names and nesting, the same defaults, enums, CEL rules,
// subresources and pruning, and no field Grove lacks. It is not a client
// type: shepherd never registers it in a scheme nor reads objects through
// it (shepherd's own types are in api/grove/v1alpha1), and shepherd's deploy
// manifests never install these CRDs. When Grove's API changes, re-read the
// new commit and update these types and the commit named above.
//
// +groupName=grove.io
package v1alpha1
