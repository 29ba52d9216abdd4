package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// GroupVersion is the group and version of this package's types.
var GroupVersion = schema.GroupVersion{Group: "grove.io", Version: "v1alpha1"}
