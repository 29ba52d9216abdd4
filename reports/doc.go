// Package reports writes what the audit of stored objects finds as
// OpenReports (openreports.io/v1alpha1), where policy dashboards and
// Kyverno's and Kubewarden's users already look: one Report per namespace
// and one ClusterReport for cluster-scoped kinds, with one result per
// violating object and rule.
//
// Reports stay bounded, which is what their users' etcd asks for: a
// report holds at most MaxResults results (the rest are counted in its
// summary and said in an annotation), is updated in place when what it
// says changes and left alone when not, and is deleted when its namespace
// has nothing left to report. Nothing here is written per admission.
//
// shepherd never installs the OpenReports CRDs: without them Sync does
// nothing and says so once; the WorkloadPolicy status and /audit are then
// the record.
package reports
