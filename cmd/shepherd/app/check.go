package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

type checkOptions struct {
	files         []string
	old           string
	context       []string
	policies      []string
	operation     string
	output        string
	noWorkloadAPI bool
	rules         ruleConfigFlags
	// fieldValidation is Strict or Warn, as kubectl's --validate.
	fieldValidation string
}

// CheckViolation is one violation in `shepherd check` output.
type CheckViolation struct {
	Rule    string `json:"rule"`
	Field   string `json:"field"`
	Message string `json:"message"`
	Action  string `json:"action"`
}

// CheckResult is the verdict on one object in `shepherd check` output.
type CheckResult struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Namespace  string                         `json:"namespace"`
	Name       string                         `json:"name"`
	Operation  string                         `json:"operation"`
	Allowed    bool                           `json:"allowed"`
	Violations []CheckViolation               `json:"violations"`
	Warnings   []string                       `json:"warnings"`
	Patch      []jsonpatch.JsonPatchOperation `json:"patch"`
	Object     map[string]any                 `json:"object"`
}

func init() {
	subcommands = append(subcommands, newCheckCommand)
}

func newCheckCommand() *cobra.Command {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check -f FILE|DIR [-f ...] [--old FILE] [--context FILE ...] [--policy FILE|DIR ...] [--operation CREATE|UPDATE|DELETE] [-o json|yaml|text]",
		Short: "Run the admission chain (defaults, then validation) on manifests, without a cluster",
		Long: `check runs shepherd's admission chain — exactly what the webhook runs: the
defaulters, then every validation rule — on the objects of the given
manifests (multi-document YAML or JSON), offline.

--context supplies the objects lookups need (runtimes a TrainJob references,
the TrainJob owning a JobSet, the PodCliqueSet owning a PodClique, a
Namespace for namespaceSelectors). --policy adds WorkloadPolicies to the
built-in rules. The Workload API is assumed to be served unless
--no-workload-api. Kinds shepherd does not cover are allowed untouched.

Exit status: 0 when every object is allowed, 1 when any is denied, 2 on a
usage or parse error.`,
		Example: `  shepherd check -f trainjob.yaml --context runtimes/
  shepherd check -f pcs.yaml --old pcs-live.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheck(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "manifest file or directory to check (repeatable)")
	f.StringVar(&o.old, "old", "", "the stored object(s) for an UPDATE (or DELETE); implies --operation UPDATE")
	f.StringArrayVar(&o.context, "context", nil, "file or directory of objects for lookups (repeatable)")
	f.StringArrayVar(&o.policies, "policy", nil, "file or directory of WorkloadPolicies to add to the built-in rules (repeatable)")
	f.StringVar(&o.operation, "operation", "", "CREATE, UPDATE or DELETE (default CREATE, UPDATE with --old)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text, json or yaml")
	f.BoolVar(&o.noWorkloadAPI, "no-workload-api", false, "judge as if the cluster did not serve the Workload API (V-TR-7)")
	f.StringSliceVar(&o.rules.disabled, "disable-rule", nil, "rule IDs to switch off (repeatable or comma-separated)")
	f.StringArrayVar(&o.rules.crds, "crd", nil, crdFlagUsage)
	f.StringVar(&o.fieldValidation, "field-validation", metav1.FieldValidationStrict, "how fields the target schema lacks are treated, as the apiserver does: Strict (kubectl's default) denies the object, Warn warns and judges it without them")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	return cmd
}

func usageError(format string, args ...any) error {
	return &ExitError{Code: 2, Err: fmt.Errorf(format, args...)}
}

func runCheck(ctx context.Context, o *checkOptions, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(o.files) == 0 {
		return usageError("check needs at least one -f FILE|DIR")
	}
	switch o.output {
	case "text", "json", "yaml":
	default:
		return usageError("-o must be text, json or yaml, got %q", o.output)
	}
	switch o.fieldValidation {
	case metav1.FieldValidationStrict, metav1.FieldValidationWarn:
	case "":
		o.fieldValidation = metav1.FieldValidationStrict
	default:
		return usageError("--field-validation must be Strict or Warn, got %q", o.fieldValidation)
	}
	op := strings.ToUpper(o.operation)
	if op == "" {
		op = "CREATE"
		if o.old != "" {
			op = "UPDATE"
		}
	}
	switch op {
	case "CREATE":
		if o.old != "" {
			return usageError("--old goes with --operation UPDATE or DELETE")
		}
	case "UPDATE", "DELETE":
	default:
		return usageError("--operation must be CREATE, UPDATE or DELETE, got %q", o.operation)
	}
	if op == "UPDATE" && o.old == "" {
		return usageError("--operation UPDATE needs --old FILE with the stored object")
	}

	objects, err := readManifests(o.files)
	if err != nil {
		return parseFailure(err)
	}
	var olds []manifest
	if o.old != "" {
		if olds, err = readManifests([]string{o.old}); err != nil {
			return parseFailure(err)
		}
	}
	ctxObjs, err := readManifests(o.context)
	if err != nil {
		return parseFailure(err)
	}
	policies, err := readPolicies(o.policies)
	if err != nil {
		return parseFailure(err)
	}

	chainRules, err := o.rules.config()
	if err != nil {
		return err
	}
	schemas := chainRules.Schemas
	lookupObjs := make([]runtime.Object, 0, len(ctxObjs))
	for _, m := range ctxObjs {
		defaultNamespace(schemas, m.obj)
		// Context objects stand for stored ones: the apiserver kept only
		// what their schema has.
		schemas.Prune(m.obj.GroupVersionKind(), m.obj.Object)
		lookupObjs = append(lookupObjs, m.obj)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{
		Lookups: webhook.NewObjectLookups(lookupObjs, !o.noWorkloadAPI),
		Rules:   chainRules,
	})
	if err != nil {
		return err
	}
	for _, p := range policies {
		if errs := chain.SetPolicy(p); len(errs) > 0 {
			return &ExitError{Code: 2, Err: fmt.Errorf("WorkloadPolicy %q does not compile:\n%s", p.Name, indent(errs.ToAggregate().Error()))}
		}
	}

	results := make([]CheckResult, 0, len(objects))
	anyDenied := false
	for _, m := range objects {
		defaultNamespace(schemas, m.obj)
		var old *unstructured.Unstructured
		if o.old != "" {
			if old, err = matchOld(schemas, m, olds, len(objects)); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			defaultNamespace(schemas, old)
		}
		// The apiserver prunes (Warn) or rejects (Strict) fields the
		// cluster's schema does not have before admission sees the object:
		// judge what it would store, and say so.
		unknown := unknownFields(schemas, m.obj, o.fieldValidation)
		if old != nil {
			schemas.Prune(old.GroupVersionKind(), old.Object)
		}
		req, err := checkRequest(op, m.obj, old)
		if err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w", m, err)}
		}
		v := chain.Admit(ctx, req)
		if len(unknown) > 0 {
			v.Violations = append(unknown, v.Violations...)
			for _, u := range unknown {
				if u.Action == webhook.ActionDeny {
					v.Allowed = false
				}
			}
		}
		subject := m.obj
		if op == "DELETE" && old != nil {
			subject = old
		}
		r := CheckResult{
			APIVersion: subject.GetAPIVersion(),
			Kind:       subject.GetKind(),
			Namespace:  subject.GetNamespace(),
			Name:       subject.GetName(),
			Operation:  op,
			Allowed:    v.Allowed,
			Violations: []CheckViolation{},
			Warnings:   append([]string{}, v.Warnings...),
			Patch:      append([]jsonpatch.JsonPatchOperation{}, v.Patch...),
			Object:     v.Object,
		}
		for _, viol := range v.Violations {
			r.Violations = append(r.Violations, CheckViolation{Rule: viol.Rule, Field: viol.Field, Message: viol.Message, Action: string(viol.Action)})
		}
		anyDenied = anyDenied || !v.Allowed
		results = append(results, r)
	}

	if err := writeCheckResults(out, o.output, results); err != nil {
		return err
	}
	if anyDenied {
		return &ExitError{Code: 1}
	}
	return nil
}

// unknownFields prunes obj like the apiserver and reports each dropped
// field: denied under Strict (kubectl's default), a warning under Warn.
func unknownFields(s *celrules.Schemas, obj *unstructured.Unstructured, validation string) []webhook.Violation {
	var out []webhook.Violation
	for _, path := range s.Prune(obj.GroupVersionKind(), obj.Object) {
		msg := fmt.Sprintf("unknown field: the schema of %s in %s has no such field", obj.GetKind(), s.Source)
		if hint := celrules.CarrierHint(path); hint != "" {
			msg += "; " + hint
		}
		v := webhook.Violation{Rule: "schema", Field: path, Action: webhook.ActionDeny, Message: msg + " (rejected under Strict field validation, dropped under Warn)"}
		if validation == metav1.FieldValidationWarn {
			v.Action = webhook.ActionWarn
		}
		out = append(out, v)
	}
	return out
}

func parseFailure(err error) error {
	var pe *ParseError
	if errors.As(err, &pe) {
		return &ExitError{Code: 2, Err: pe}
	}
	return &ExitError{Code: 2, Err: err}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// defaultNamespace puts namespaced shepherd kinds without a namespace into
// "default", as kubectl would.
func defaultNamespace(s *celrules.Schemas, u *unstructured.Unstructured) {
	if u == nil || u.GetNamespace() != "" {
		return
	}
	switch u.GroupVersionKind().GroupKind() {
	case schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "ClusterTrainingRuntime"},
		schema.GroupKind{Group: "shepherd.dev", Kind: "WorkloadPolicy"},
		schema.GroupKind{Kind: "Namespace"}:
		return
	}
	if len(s.Versions(u.GroupVersionKind().GroupKind())) > 0 {
		u.SetNamespace("default")
	}
}

// matchOld finds the stored object for m: the only one when both sides
// hold one object, else the one of the same kind, namespace and name.
func matchOld(s *celrules.Schemas, m manifest, olds []manifest, nObjects int) (*unstructured.Unstructured, error) {
	if len(olds) == 1 && nObjects == 1 {
		return olds[0].obj, nil
	}
	gk := m.obj.GroupVersionKind().GroupKind()
	for _, o := range olds {
		ns := o.obj.GetNamespace()
		if ns == "" {
			defaultNamespace(s, o.obj)
			ns = o.obj.GetNamespace()
		}
		if o.obj.GroupVersionKind().GroupKind() == gk && ns == m.obj.GetNamespace() && o.obj.GetName() == m.obj.GetName() {
			return o.obj, nil
		}
	}
	return nil, fmt.Errorf("%s: no object in --old matches %s %s/%s", m, gk.Kind, m.obj.GetNamespace(), m.obj.GetName())
}

func checkRequest(op string, obj, old *unstructured.Unstructured) (*webhook.Request, error) {
	subject := obj
	if op == "DELETE" && old != nil {
		subject = old
	}
	gvk := subject.GroupVersionKind()
	req := &webhook.Request{
		UID:       "shepherd-check",
		Operation: admissionv1.Operation(op),
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: subject.GetNamespace(),
		Name:      subject.GetName(),
		UserInfo:  authenticationv1.UserInfo{Username: "shepherd-check"},
	}
	var err error
	if op != "DELETE" {
		if req.Object, err = json.Marshal(obj.Object); err != nil {
			return nil, err
		}
	}
	if old != nil {
		if req.OldObject, err = json.Marshal(old.Object); err != nil {
			return nil, err
		}
	}
	if op == "DELETE" && old == nil {
		// DELETE of the given manifest: it is the stored object.
		if req.OldObject, err = json.Marshal(obj.Object); err != nil {
			return nil, err
		}
	}
	return req, nil
}

func writeCheckResults(out io.Writer, format string, results []CheckResult) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(results)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	var sb strings.Builder
	for _, r := range results {
		verdict := "allowed"
		if !r.Allowed {
			verdict = "DENIED"
		}
		name := r.Name
		if r.Namespace != "" {
			name = r.Namespace + "/" + r.Name
		}
		fmt.Fprintf(&sb, "%s %s (%s): %s\n", r.Kind, name, r.Operation, verdict)
		for _, v := range r.Violations {
			field := v.Field
			if field == "" {
				field = "(object)"
			}
			fmt.Fprintf(&sb, "    %-5s %s: %s [%s]\n", strings.ToLower(v.Action), field, v.Message, v.Rule)
		}
		for _, w := range r.Warnings {
			if !isViolationWarning(w, r.Violations) {
				fmt.Fprintf(&sb, "    warn  %s\n", w)
			}
		}
		if len(r.Patch) > 0 {
			paths := make([]string, 0, len(r.Patch))
			for _, p := range r.Patch {
				paths = append(paths, p.Operation+" "+p.Path)
			}
			fmt.Fprintf(&sb, "    defaulted: %s\n", strings.Join(paths, ", "))
		}
	}
	_, err := io.WriteString(out, sb.String())
	return err
}

// isViolationWarning reports whether warning w renders a Warn violation
// that the text output already shows.
func isViolationWarning(w string, vs []CheckViolation) bool {
	for _, v := range vs {
		if v.Action == "Warn" && (w == v.Message || w == v.Field+": "+v.Message) {
			return true
		}
	}
	return false
}
