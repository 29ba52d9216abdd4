// Package reconcile starts shepherd's controllers. Each controller lives in
// its own package beneath this one (trainjob, workload, gang, training) and
// follows one shape: a thin Reconcile reads state, a pure decision function
// given a clock says what to do and when to look again, thin code applies it
// with patches, then emits events and metrics.
package reconcile
