package celrules

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"weak"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/common"
)

// ValidateObject validates obj (decoded JSON) against the schema of gvk the
// way a kube-apiserver validates a custom resource on create: with
// apiextensions-apiserver's own schema validator, so a field of the wrong
// type, a value outside an enum or a missing required field is reported
// with the apiserver's field path and message, e.g.
//
//	spec.trainer.numNodes: Invalid value: "string": spec.trainer.numNodes in body must be of type integer: "string"
//
// Rules then never see a value of another type than their schema promises
// (CEL would answer "no such overload"). A kind without a schema here is
// not checked (nil). Only the OpenAPI schema is checked: ObjectMeta and the
// CRD's own x-kubernetes-validations are the apiserver's business.
func (s *Schemas) ValidateObject(gvk schema.GroupVersionKind, obj map[string]any) field.ErrorList {
	v, _, err := s.objectValidator(gvk)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	if v == nil || obj == nil {
		return nil
	}
	return sorted(apiservervalidation.ValidateCustomResource(nil, obj, v))
}

// ValidateObjectUpdate is ValidateObject for an UPDATE from old to obj, as
// the apiserver validates it: errors in values that did not change are
// ratcheted (dropped), so an object stored under an older schema can still
// be updated elsewhere.
func (s *Schemas) ValidateObjectUpdate(gvk schema.GroupVersionKind, obj, old map[string]any) field.ErrorList {
	if old == nil {
		return s.ValidateObject(gvk, obj)
	}
	v, st, err := s.objectValidator(gvk)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	if v == nil || obj == nil {
		return nil
	}
	correlated := common.NewCorrelatedObject(obj, old, &model.Structural{Structural: st})
	return sorted(apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, v, apiservervalidation.WithRatcheting(correlated)))
}

// sorted orders errs by field, then message: the validator walks maps in
// random order, and the same object should get the same answer each time.
func sorted(errs field.ErrorList) field.ErrorList {
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].Field != errs[j].Field {
			return errs[i].Field < errs[j].Field
		}
		return errs[i].Error() < errs[j].Error()
	})
	return errs
}

// DropNulls removes from obj (decoded JSON, changed in place) every null
// of a field whose schema is neither nullable nor defaulted, as the
// apiserver does when it decodes a custom resource, right after pruning:
// such a null never reaches admission, nor the schema validation of
// ValidateObject (which would report it as a value of the wrong type).
// Kinds without a schema here are left alone.
func (s *Schemas) DropNulls(gvk schema.GroupVersionKind, obj map[string]any) {
	if st, ok := s.structural[gvk]; ok {
		defaulting.PruneNonNullableNullsWithoutDefaults(obj, st)
	}
}

// objectValidators caches a schema validator per structural schema:
// building one converts the whole schema (tens of milliseconds for a kind
// embedding a pod template), validating with it takes microseconds. The
// key is weak and the entry is removed once its schema is collected, so
// the schema sets serve replaces when CRDs change do not accumulate here.
var objectValidators = struct {
	sync.Mutex
	m map[weak.Pointer[structuralschema.Structural]]*objectValidator
}{m: map[weak.Pointer[structuralschema.Structural]]*objectValidator{}}

// objectValidator is built once per schema, by whoever asks first.
type objectValidator struct {
	once sync.Once
	v    apiservervalidation.SchemaValidator
	err  error
}

// objectValidator returns the validator of gvk's schema and the schema, or
// nil when s has no schema for gvk.
func (s *Schemas) objectValidator(gvk schema.GroupVersionKind) (apiservervalidation.SchemaValidator, *structuralschema.Structural, error) {
	st, ok := s.structural[gvk]
	if !ok {
		return nil, nil, nil
	}
	key := weak.Make(st)
	objectValidators.Lock()
	ov, ok := objectValidators.m[key]
	if !ok {
		ov = &objectValidator{}
		objectValidators.m[key] = ov
		runtime.AddCleanup(st, func(k weak.Pointer[structuralschema.Structural]) {
			objectValidators.Lock()
			delete(objectValidators.m, k)
			objectValidators.Unlock()
		}, key)
	}
	objectValidators.Unlock()
	ov.once.Do(func() {
		ov.v, ov.err = newObjectValidator(st)
		if ov.err != nil {
			ov.err = fmt.Errorf("building the schema validator of %v: %w", gvk, ov.err)
		}
	})
	return ov.v, st, ov.err
}

// newObjectValidator builds the validator the apiserver builds for a CRD
// version. It takes the CRD's JSONSchemaProps, which Schemas does not keep;
// the structural schema converts back to them without loss (its OpenAPI
// form is documented as faithful and roundtrippable), so the validator is
// the apiserver's own, including its handling of int-or-string, nullable
// and the formats it supports.
func newObjectValidator(st *structuralschema.Structural) (apiservervalidation.SchemaValidator, error) {
	raw, err := json.Marshal(st.ToKubeOpenAPI())
	if err != nil {
		return nil, err
	}
	var v1 apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal(raw, &v1); err != nil {
		return nil, err
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1, &internal, nil); err != nil {
		return nil, err
	}
	v, _, err := apiservervalidation.NewSchemaValidator(&internal)
	return v, err
}
