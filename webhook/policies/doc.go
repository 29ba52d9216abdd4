// Package policies hot-reloads WorkloadPolicies into the admission chain: a
// controller on every replica (each serves admission) watches the
// cluster-scoped WorkloadPolicy objects, hands each new generation to the
// chain to compile, and reports the outcome in the policy's status — Ready
// True/Compiled, or False/CompileError with every failing expression. A
// policy that fails to compile is taken out of the chain entirely, so it is
// never half-applied, and the other policies are untouched.
package policies
