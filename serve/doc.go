// Package serve is `shepherd serve`: Options (DefaultOptions, and AddFlags
// to bind them to a command line), then Run, which waits for the
// apiserver, serves admission on every replica (the webhooks of
// webhook/server over the chain of package webhook, WorkloadPolicies and
// PolicyExceptions hot-reloaded), runs the leader's half in terms of
// leadership (package leader: the reconcilers, the certificate authority,
// the background audit, the UPDATE matchCondition keeper), and shuts down
// as docs/operations.md describes. One file per concern: serve.go the
// wiring, chain.go the admission chain and the schemas it follows,
// frameworks.go which frameworks are active, audit.go the background
// audit, updatefilter.go the matchCondition keeper, native.go the native
// admission mode, lifecycle.go start and shutdown. cmd/shepherd only adds
// the command around it; the test suites compose it from here
// (test/cluster.ServeMain).
package serve
