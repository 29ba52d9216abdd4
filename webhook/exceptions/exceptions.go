// Package exceptions decides which rule violations a PolicyException
// (shepherd.dev/v1alpha1) exempts: pure functions of the exceptions, the
// object's and its namespace's labels, and the time. The admission chain
// asks it after judging (webhook.Chain.SetExceptions), so an exempt
// violation is still found and audited, with the exception's name and
// expiry; the exports ask it to rewrite the ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies they write (export.go), so the apiserver
// exempts the same objects. docs/policies.md ("Exceptions") is the user's
// side of it.
package exceptions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Kind is the kind of the exception objects.
const Kind = "PolicyException"

// Set is a set of exceptions, their selectors parsed once. The zero value
// and nil exempt nothing. A Set is never changed once made: it is safe for
// concurrent use.
type Set struct {
	items []exception
}

type exception struct {
	name    string
	rules   []string
	ns, obj *metav1.LabelSelector // nil: every one
	nsSel   labels.Selector       // nil when ns is nil
	objSel  labels.Selector       // nil when obj is nil
	expires *time.Time
	reason  string
}

// Exemption is the exception that exempts a violation.
type Exemption struct {
	// Exception is the PolicyException's name.
	Exception string `json:"exception"`
	// Expires is when it stops applying; nil: never.
	Expires *time.Time `json:"expires,omitempty"`
	// Reason is the exception's reason.
	Reason string `json:"exceptionReason,omitempty"`
}

// Until says until when e applies, for messages and records.
func (e Exemption) Until() string {
	if e.Expires == nil {
		return "no expiry"
	}
	return "until " + e.Expires.UTC().Format(time.RFC3339)
}

// Validate lists what is wrong with an exception's spec beyond its schema:
// selectors that do not parse, and (when known is not nil) rules that are
// neither a known built-in rule nor a policy; known reports whether a rule
// exists.
func Validate(p *shepherdv1alpha1.PolicyException, known func(rule string) bool) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if len(p.Spec.Rules) == 0 {
		errs = append(errs, field.Required(spec.Child("rules"), "name at least one rule: a built-in rule ID (V-TJ-1) or a WorkloadPolicy's name"))
	}
	for i, r := range p.Spec.Rules {
		if r == "" {
			errs = append(errs, field.Invalid(spec.Child("rules").Index(i), r, "empty rule: give a built-in rule ID (V-TJ-1) or a WorkloadPolicy's name"))
		} else if known != nil && !known(r) {
			errs = append(errs, field.NotFound(spec.Child("rules").Index(i), r))
		}
	}
	errs = append(errs, validateSelector(p.Spec.NamespaceSelector, spec.Child("namespaceSelector"))...)
	errs = append(errs, validateSelector(p.Spec.ObjectSelector, spec.Child("objectSelector"))...)
	return errs
}

// validateSelector checks a selector as the apiserver checks a webhook's,
// each error naming the requirement and the field in it
// (objectSelector.matchExpressions[0].operator), not the whole selector.
func validateSelector(s *metav1.LabelSelector, path *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	errs := metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, path)
	if _, err := metav1.LabelSelectorAsSelector(s); err != nil && len(errs) == 0 {
		// What the apiserver's validation lets through and the parser
		// does not: the whole selector, as kubectl would print it.
		errs = append(errs, field.Invalid(path, metav1.FormatLabelSelector(s), err.Error()))
	}
	return errs
}

// NewSet parses the exceptions. One that does not parse (Validate without
// known) is left out and named in the error; the others are in the Set.
func NewSet(list []*shepherdv1alpha1.PolicyException) (*Set, error) {
	s := &Set{}
	var errs []error
	for _, p := range list {
		if bad := Validate(p, nil); len(bad) > 0 {
			errs = append(errs, fmt.Errorf("PolicyException %s: %w", p.Name, bad.ToAggregate()))
			continue
		}
		e := exception{name: p.Name, rules: slices.Clone(p.Spec.Rules), reason: p.Spec.Reason}
		if p.Spec.NamespaceSelector != nil {
			e.ns = p.Spec.NamespaceSelector.DeepCopy()
			e.nsSel, _ = metav1.LabelSelectorAsSelector(e.ns) // parsed by Validate
		}
		if p.Spec.ObjectSelector != nil {
			e.obj = p.Spec.ObjectSelector.DeepCopy()
			e.objSel, _ = metav1.LabelSelectorAsSelector(e.obj)
		}
		if p.Spec.Expires != nil {
			t := p.Spec.Expires.UTC()
			e.expires = &t
		}
		s.items = append(s.items, e)
	}
	// One order whatever the list's: the first exception by name exempts.
	sort.Slice(s.items, func(i, j int) bool { return s.items[i].name < s.items[j].name })
	return s, errors.Join(errs...)
}

// Stored lists the PolicyExceptions r holds, leaving out those being
// deleted: what the controllers of serve build their Set from.
func Stored(ctx context.Context, r client.Reader) ([]*shepherdv1alpha1.PolicyException, error) {
	var list shepherdv1alpha1.PolicyExceptionList
	if err := r.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing PolicyExceptions: %w", err)
	}
	out := make([]*shepherdv1alpha1.PolicyException, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// Len is the number of exceptions in the set, expired or not.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.items)
}

// Object is what an exception selects on: the labels of the object, of the
// stored object (an update; nil otherwise) and of its namespace.
type Object struct {
	Labels    map[string]string
	OldLabels map[string]string
	// Namespaced says the object is namespaced; then NamespaceLabels are
	// its namespace's, and NamespaceKnown says they could be read (an
	// exception with a namespaceSelector exempts nothing in a namespace
	// whose labels are unknown).
	Namespaced      bool
	NamespaceKnown  bool
	NamespaceLabels map[string]string
}

// Exempt returns the exception that exempts a violation of rule on o at
// now: the first by name that names the rule, has not expired, and
// selects o.
func (s *Set) Exempt(rule string, o Object, now time.Time) (Exemption, bool) {
	if s == nil {
		return Exemption{}, false
	}
	for i := range s.items {
		e := &s.items[i]
		if !slices.Contains(e.rules, rule) || e.expired(now) || !e.selects(o) {
			continue
		}
		return Exemption{Exception: e.name, Expires: e.expires, Reason: e.reason}, true
	}
	return Exemption{}, false
}

// Names some exception that is in force at now for rule: whether rule
// could be exempted on any object (the chain's fast path).
func (s *Set) Names(rule string, now time.Time) bool {
	if s == nil {
		return false
	}
	for i := range s.items {
		if !s.items[i].expired(now) && slices.Contains(s.items[i].rules, rule) {
			return true
		}
	}
	return false
}

// NextExpiry is the earliest expiry after now, when any exception has one.
func (s *Set) NextExpiry(now time.Time) (time.Time, bool) {
	var next time.Time
	if s == nil {
		return next, false
	}
	for i := range s.items {
		if x := s.items[i].expires; x != nil && x.After(now) && (next.IsZero() || x.Before(next)) {
			next = *x
		}
	}
	return next, !next.IsZero()
}

// expired: an exception applies up to, not at, its expiry.
func (e *exception) expired(now time.Time) bool {
	return e.expires != nil && !now.Before(*e.expires)
}

func (e *exception) selects(o Object) bool {
	if e.nsSel != nil {
		if !o.Namespaced || !o.NamespaceKnown || !e.nsSel.Matches(labels.Set(o.NamespaceLabels)) {
			return false
		}
	}
	if e.objSel != nil {
		// As a webhook's objectSelector: the object's labels or the stored
		// object's, so removing the label in an update is still exempt.
		if !e.objSel.Matches(labels.Set(o.Labels)) && (o.OldLabels == nil || !e.objSel.Matches(labels.Set(o.OldLabels))) {
			return false
		}
	}
	return true
}
