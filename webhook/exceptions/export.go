package exceptions

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// Variable is the name of the variable an exported policy exempts with; a
// WorkloadPolicy may not name a variable so (celrules reserves it).
const Variable = celrules.ExemptVariable

const (
	// AnnotationExceptions names the exceptions an exported policy honours.
	AnnotationExceptions = "shepherd.dev/exceptions"
	// AnnotationExpires is the earliest of their expiries: the apiserver's
	// CEL has no clock, so from then on the exported policy exempts more
	// than the exceptions do, until it is exported again (serve in native
	// mode does so at the expiry; a static export must be re-run).
	AnnotationExpires = "shepherd.dev/exceptions-expire"
)

// ExemptVAP rewrites an exported ValidatingAdmissionPolicy of rule (its
// built-in ID or WorkloadPolicy name) so the apiserver exempts the objects
// the exceptions in force at now exempt from it: a variable true for such
// an object, and each validation passing when it is true. It reports
// whether vap now exempts anything: false for a policy no exception in
// force names, which is left as exported.
//
// The exemption is a variable, not a match condition, because a
// ValidatingAdmissionPolicy's matchConditions cannot read namespaceObject
// (the apiserver's matcher evaluates them without the namespace), and
// selecting by the namespace's labels needs it.
//
// A policy rewritten before is first restored (UnexemptVAP), so the
// rewrite can be applied again to what the cluster holds.
func (s *Set) ExemptVAP(rule string, vap *admissionregistrationv1.ValidatingAdmissionPolicy, now time.Time) bool {
	UnexemptVAP(vap)
	terms := s.exemptTerms(rule, now)
	if len(terms) == 0 {
		return false
	}
	expr, names, expires := exemptExpression(terms)
	vap.Spec.AuditAnnotations = append(vap.Spec.AuditAnnotations, admissionregistrationv1.AuditAnnotation{
		Key: AuditKey, ValueExpression: auditExpression(terms, vap.Spec.Validations),
	})
	vap.Spec.Variables = append([]admissionregistrationv1.Variable{{Name: Variable, Expression: expr}}, vap.Spec.Variables...)
	for i := range vap.Spec.Validations {
		v := &vap.Spec.Validations[i]
		v.Expression = vapPrefix + v.Expression + ")"
	}
	annotate(&vap.ObjectMeta, names, expires)
	return true
}

// ExemptMAP rewrites an exported MutatingAdmissionPolicy of the defaulter
// rule as ExemptVAP does: each JSON patch is empty for an exempt object
// (a filter keeps the patch's type, which the apiserver checks). A
// mutation that is not a JSON patch is an error: shepherd exports none.
func (s *Set) ExemptMAP(rule string, mp *admissionregistrationv1.MutatingAdmissionPolicy, now time.Time) (bool, error) {
	UnexemptMAP(mp)
	terms := s.exemptTerms(rule, now)
	if len(terms) == 0 {
		return false, nil
	}
	expr, names, expires := exemptExpression(terms)
	for i := range mp.Spec.Mutations {
		m := &mp.Spec.Mutations[i]
		if m.PatchType != admissionregistrationv1.PatchTypeJSONPatch || m.JSONPatch == nil {
			return false, fmt.Errorf("MutatingAdmissionPolicy %s: mutation %d is not a JSON patch; exceptions can exempt only JSON patches", mp.Name, i)
		}
		m.JSONPatch.Expression = "(" + m.JSONPatch.Expression + mapSuffix
	}
	mp.Spec.Variables = append([]admissionregistrationv1.Variable{{Name: Variable, Expression: expr}}, mp.Spec.Variables...)
	annotate(&mp.ObjectMeta, names, expires)
	return true, nil
}

const (
	vapPrefix = "variables." + Variable + " || ("
	mapSuffix = ").filter(p, !variables." + Variable + ")"
)

// UnexemptVAP undoes ExemptVAP: vap as exported without exceptions. It
// reports whether vap had been rewritten.
func UnexemptVAP(vap *admissionregistrationv1.ValidatingAdmissionPolicy) bool {
	was := dropVariable(&vap.Spec.Variables)
	n := len(vap.Spec.AuditAnnotations)
	vap.Spec.AuditAnnotations = slices.DeleteFunc(vap.Spec.AuditAnnotations, func(a admissionregistrationv1.AuditAnnotation) bool { return a.Key == AuditKey })
	if len(vap.Spec.AuditAnnotations) != n {
		was = true
	}
	if len(vap.Spec.AuditAnnotations) == 0 {
		vap.Spec.AuditAnnotations = nil
	}
	for i := range vap.Spec.Validations {
		v := &vap.Spec.Validations[i]
		if strings.HasPrefix(v.Expression, vapPrefix) && strings.HasSuffix(v.Expression, ")") {
			v.Expression = strings.TrimSuffix(strings.TrimPrefix(v.Expression, vapPrefix), ")")
			was = true
		}
	}
	return unannotate(&vap.ObjectMeta) || was
}

// UnexemptMAP undoes ExemptMAP.
func UnexemptMAP(mp *admissionregistrationv1.MutatingAdmissionPolicy) bool {
	was := dropVariable(&mp.Spec.Variables)
	for i := range mp.Spec.Mutations {
		if j := mp.Spec.Mutations[i].JSONPatch; j != nil && strings.HasPrefix(j.Expression, "(") && strings.HasSuffix(j.Expression, mapSuffix) {
			j.Expression = strings.TrimSuffix(strings.TrimPrefix(j.Expression, "("), mapSuffix)
			was = true
		}
	}
	return unannotate(&mp.ObjectMeta) || was
}

func dropVariable(vs *[]admissionregistrationv1.Variable) bool {
	n := len(*vs)
	*vs = slices.DeleteFunc(*vs, func(v admissionregistrationv1.Variable) bool { return v.Name == Variable })
	if len(*vs) == 0 {
		*vs = nil
	}
	return len(*vs) != n
}

func unannotate(m *metav1.ObjectMeta) bool {
	_, a := m.Annotations[AnnotationExceptions]
	_, b := m.Annotations[AnnotationExpires]
	delete(m.Annotations, AnnotationExceptions)
	delete(m.Annotations, AnnotationExpires)
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	return a || b
}

// RuleOf is the rule an exported policy (or binding) of one of the rules the
// exceptions name carries, from its name (celrules.PolicyName); "" for
// others.
func (s *Set) RuleOf(policyName string) string {
	if s == nil {
		return ""
	}
	for i := range s.items {
		for _, r := range s.items[i].rules {
			if policyName == celrules.PolicyName(r, celrules.SourceBuiltin) || policyName == celrules.PolicyName(r, celrules.SourcePolicy) {
				return r
			}
		}
	}
	return ""
}

func annotate(m *metav1.ObjectMeta, names []string, expires *time.Time) {
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[AnnotationExceptions] = strings.Join(names, ",")
	if expires != nil {
		m.Annotations[AnnotationExpires] = expires.UTC().Format(time.RFC3339)
	}
}

// term is one exception in force for a rule, as CEL.
type term struct {
	expr    string
	name    string
	expires *time.Time
}

// exemptTerms are the exceptions in force at now that name rule, each as
// the CEL that is true for an object it exempts, in the Set's order (by
// name: the first exempts).
func (s *Set) exemptTerms(rule string, now time.Time) []term {
	if s == nil {
		return nil
	}
	var out []term
	for i := range s.items {
		e := &s.items[i]
		if !slices.Contains(e.rules, rule) || e.expired(now) {
			continue
		}
		var parts []string
		if e.ns != nil {
			parts = append(parts, "(namespaceObject != null && "+selectorCEL(e.ns, "namespaceObject")+")")
		}
		if e.obj != nil {
			parts = append(parts, "((object != null && "+selectorCEL(e.obj, "object")+") || (oldObject != null && "+selectorCEL(e.obj, "oldObject")+"))")
		}
		if len(parts) == 0 {
			parts = []string{"true"}
		}
		out = append(out, term{expr: strings.Join(parts, " && "), name: e.name, expires: e.expires})
	}
	return out
}

// exemptExpression is the CEL that is true for an object one of terms
// exempts, the exceptions' names and their earliest expiry.
func exemptExpression(terms []term) (string, []string, *time.Time) {
	var exprs, names []string
	var expires *time.Time
	for _, t := range terms {
		exprs = append(exprs, t.expr)
		names = append(names, t.name)
		if t.expires != nil && (expires == nil || t.expires.Before(*expires)) {
			expires = t.expires
		}
	}
	return strings.Join(exprs, " || "), names, expires
}

// AuditKey is the key of the audit annotation with which an exported
// ValidatingAdmissionPolicy tells of an exempt violation: the apiserver
// publishes it in the request's audit event as "<policy>/exempt", which
// the audit sink (webhook/auditsink) records as an Exempt verdict.
const AuditKey = "exempt"

// auditExpression is the valueExpression of the AuditKey annotation: empty
// unless the object is exempt and a validation fails (the rule would have
// denied or warned), else the exempting exception's name, its expiry
// (RFC 3339, or empty) and the first failing validation's message, one a
// line (ParseAudit). The validations are evaluated again only for exempt
// objects.
func auditExpression(terms []term, validations []admissionregistrationv1.Validation) string {
	var which strings.Builder
	for _, t := range terms {
		until := ""
		if t.expires != nil {
			until = t.expires.UTC().Format(time.RFC3339)
		}
		which.WriteString("(" + t.expr + ") ? " + quote(t.name+"\n"+until+"\n") + " : ")
	}
	which.WriteString("''")
	var message strings.Builder
	for _, v := range validations {
		message.WriteString("!(" + v.Expression + ") ? " + quote(v.Message) + " : ")
	}
	message.WriteString("''")
	var all []string
	for _, v := range validations {
		all = append(all, "("+v.Expression+")")
	}
	// An empty value publishes nothing (the apiserver trims it and leaves
	// the annotation out); null would too, but a conditional of a string
	// and null does not type-check, and the value must be a string or null.
	return "variables." + Variable + " && !(" + strings.Join(all, " && ") + ") ? (" + which.String() + ") + (" + message.String() + ") : ''"
}

// ParseAudit reads the value of an AuditKey annotation.
func ParseAudit(value string) (Exemption, string, bool) {
	name, rest, ok := strings.Cut(value, "\n")
	if !ok || name == "" {
		return Exemption{}, "", false
	}
	until, message, _ := strings.Cut(rest, "\n")
	e := Exemption{Exception: name}
	if t, err := time.Parse(time.RFC3339, until); err == nil {
		e.Expires = &t
	}
	return e, message, true
}

// selectorCEL is a label selector as CEL over x's labels, with the meaning
// of labels.Selector.Matches: every requirement holds (an empty selector
// selects everything).
func selectorCEL(sel *metav1.LabelSelector, x string) string {
	label := func(k string) string { return x + ".metadata.?labels[?" + quote(k) + "]" }
	var reqs []string
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		reqs = append(reqs, label(k)+" == optional.of("+quote(sel.MatchLabels[k])+")")
	}
	for _, r := range sel.MatchExpressions {
		values := make([]string, len(r.Values))
		for i, v := range r.Values {
			values[i] = quote(v)
		}
		in := label(r.Key) + ".hasValue() && " + label(r.Key) + ".value() in [" + strings.Join(values, ", ") + "]"
		switch r.Operator {
		case metav1.LabelSelectorOpIn:
			reqs = append(reqs, "("+in+")")
		case metav1.LabelSelectorOpNotIn:
			reqs = append(reqs, "!("+in+")")
		case metav1.LabelSelectorOpExists:
			reqs = append(reqs, label(r.Key)+".hasValue()")
		case metav1.LabelSelectorOpDoesNotExist:
			reqs = append(reqs, "!"+label(r.Key)+".hasValue()")
		}
	}
	if len(reqs) == 0 {
		return "true"
	}
	return "(" + strings.Join(reqs, " && ") + ")"
}

// quote is s as a CEL string literal: label keys and values (letters,
// digits, '-', '_', '.' and '/': Validate parses every selector first),
// and messages, which may hold anything.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s) + "'"
}
