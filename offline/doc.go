// Package offline is shepherd's stand-in for the apiserver, shared by
// `shepherd check`, `shepherd test` and `shepherd audit --policy`: it reads
// manifests as kubectl would (files, directories, standard input, lists;
// bounded by --max-input-bytes; errors naming the file and line), builds
// the admission chain with lookups answered from given objects, and admits
// an object as the apiserver and shepherd's webhooks would (pruned by its
// schema, defaulted, validated, within a deadline). On that it builds what
// the commands report: check's verdicts (Check), test's suites
// (PrepareSuite) and audit --policy's impact (Impact). One place does this, so
// a suite's verdict is check's verdict by construction. The commands in
// cmd/shepherd only map their flags onto it (docs/policies.md).
package offline
