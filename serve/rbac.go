package serve

// Permissions of serve's secure metrics and /audit endpoints
// (filters.WithAuthenticationAndAuthorization in serve.go: a caller's token
// is authenticated and authorized by the apiserver), for RBAC generation;
// test/rbac checks the shipped RBAC grants them.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
