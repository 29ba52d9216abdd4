package celrules

import (
	"fmt"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// variablesType is the CEL type of `variables`, named as the apiserver
// names it.
var variablesType = types.NewObjectType("kubernetes.variables", traits.IndexerType|traits.FieldTesterType|traits.IterableType)

// ruleVariables is the CEL value `variables` of one rule in one request:
// each variable is evaluated on first use, at most once.
type ruleVariables struct {
	a      *activation
	defs   []compiledVariable
	values []ref.Val
}

var _ traits.Mapper = (*ruleVariables)(nil)

func (v *ruleVariables) index(key ref.Val) int {
	name, ok := key.(types.String)
	if !ok {
		return -1
	}
	for i, d := range v.defs {
		if d.name == string(name) {
			return i
		}
	}
	return -1
}

func (v *ruleVariables) Find(key ref.Val) (ref.Val, bool) {
	i := v.index(key)
	if i < 0 {
		return nil, false
	}
	if v.values[i] == nil {
		v.values[i] = v.a.r.variable(v.a, v.defs[i])
	}
	return v.values[i], true
}

func (v *ruleVariables) Get(key ref.Val) ref.Val {
	if val, found := v.Find(key); found {
		return val
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

func (v *ruleVariables) Contains(key ref.Val) ref.Val {
	val, found := v.Find(key)
	if val != nil && types.IsUnknownOrError(val) {
		return val
	}
	return types.Bool(found)
}

func (v *ruleVariables) Iterator() traits.Iterator {
	names := make([]string, len(v.defs))
	for i, d := range v.defs {
		names[i] = d.name
	}
	return types.NewStringList(types.DefaultTypeAdapter, names).Iterator()
}

func (v *ruleVariables) Size() ref.Val  { return types.Int(len(v.defs)) }
func (v *ruleVariables) Type() ref.Type { return variablesType }
func (v *ruleVariables) Value() any     { return nil }
func (v *ruleVariables) Equal(other ref.Val) ref.Val {
	o, ok := other.(*ruleVariables)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(o == v)
}

func (v *ruleVariables) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case variablesType:
		return v
	case types.TypeType:
		return variablesType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", variablesType.TypeName(), t.TypeName())
}

func (v *ruleVariables) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from '%s' to '%v'", variablesType.TypeName(), t)
}
