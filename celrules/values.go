package celrules

import (
	"fmt"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// The CEL values of a request's objects. The apiserver hands CEL the
// decoded JSON maps and lets cel-go wrap every map and list it reaches in a
// fresh value, on every access of every expression; that allocation (and its
// garbage) is most of what evaluating a rule costs. jsonObject and jsonList
// are the same maps and lists seen as CEL values without copying: a
// jsonObject is a map, so wrapping a nested object allocates nothing.
//
// Only reads are specialised (field selection, indexing, iteration, size,
// membership). Everything else — equality, conversion, concatenation,
// formatting — is delegated to cel-go's own wrappers of the same data, so
// the semantics are cel-go's.

// celValue is the CEL value of one decoded JSON value.
func celValue(v any) ref.Val {
	switch t := v.(type) {
	case map[string]any:
		return jsonObject(t)
	case []any:
		return jsonList(t)
	case string:
		return types.String(t)
	case int64:
		return types.Int(t)
	case bool:
		return types.Bool(t)
	case float64:
		return types.Double(t)
	case nil:
		return types.NullValue
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// jsonObject is a decoded JSON object as a CEL map(string, dyn).
type jsonObject map[string]any

var (
	_ traits.Mapper = jsonObject(nil)
	_ traits.Zeroer = jsonObject(nil)
)

// std is cel-go's own wrapper of the same map.
func (o jsonObject) std() traits.Mapper {
	return types.NewStringInterfaceMap(types.DefaultTypeAdapter, o)
}

func (o jsonObject) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return o.std().Find(key)
	}
	v, found := o[string(k)]
	if !found {
		return nil, false
	}
	return celValue(v), true
}

func (o jsonObject) Get(key ref.Val) ref.Val {
	v, found := o.Find(key)
	if !found {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

func (o jsonObject) Contains(key ref.Val) ref.Val {
	_, found := o.Find(key)
	return types.Bool(found)
}

func (o jsonObject) Size() ref.Val                               { return types.Int(len(o)) }
func (o jsonObject) Iterator() traits.Iterator                   { return o.std().Iterator() }
func (o jsonObject) IsZeroValue() bool                           { return len(o) == 0 }
func (o jsonObject) Type() ref.Type                              { return types.MapType }
func (o jsonObject) Value() any                                  { return map[string]any(o) }
func (o jsonObject) Equal(other ref.Val) ref.Val                 { return o.std().Equal(other) }
func (o jsonObject) ConvertToType(t ref.Type) ref.Val            { return o.std().ConvertToType(t) }
func (o jsonObject) ConvertToNative(t reflect.Type) (any, error) { return o.std().ConvertToNative(t) }
func (o jsonObject) String() string                              { return fmt.Sprint(o.std()) }

// jsonList is a decoded JSON array as a CEL list(dyn).
type jsonList []any

var (
	_ traits.Lister   = jsonList(nil)
	_ traits.Foldable = jsonList(nil)
	_ traits.Zeroer   = jsonList(nil)
)

func (l jsonList) std() traits.Lister {
	return types.NewDynamicList(types.DefaultTypeAdapter, []any(l))
}

func (l jsonList) Get(index ref.Val) ref.Val {
	i, err := types.IndexOrError(index)
	if err != nil || i < 0 || i >= len(l) {
		// cel-go's errors, word for word.
		return l.std().Get(index)
	}
	return celValue(l[i])
}

func (l jsonList) Contains(elem ref.Val) ref.Val {
	for _, e := range l {
		if b, ok := elem.Equal(celValue(e)).(types.Bool); ok && b == types.True {
			return types.True
		}
	}
	return types.False
}

func (l jsonList) Fold(f traits.Folder) {
	for i, e := range l {
		if !f.FoldEntry(i, celValue(e)) {
			break
		}
	}
}

func (l jsonList) Iterator() traits.Iterator                   { return &jsonListIterator{list: l} }
func (l jsonList) Size() ref.Val                               { return types.Int(len(l)) }
func (l jsonList) IsZeroValue() bool                           { return len(l) == 0 }
func (l jsonList) Type() ref.Type                              { return types.ListType }
func (l jsonList) Value() any                                  { return []any(l) }
func (l jsonList) Add(other ref.Val) ref.Val                   { return l.std().Add(other) }
func (l jsonList) Equal(other ref.Val) ref.Val                 { return l.std().Equal(other) }
func (l jsonList) ConvertToType(t ref.Type) ref.Val            { return l.std().ConvertToType(t) }
func (l jsonList) ConvertToNative(t reflect.Type) (any, error) { return l.std().ConvertToNative(t) }
func (l jsonList) String() string                              { return fmt.Sprint(l.std()) }

// jsonListIterator iterates a jsonList's elements as CEL values.
type jsonListIterator struct {
	list jsonList
	next int
}

var _ traits.Iterator = (*jsonListIterator)(nil)

func (it *jsonListIterator) HasNext() ref.Val { return types.Bool(it.next < len(it.list)) }

func (it *jsonListIterator) Next() ref.Val {
	if it.next >= len(it.list) {
		return nil
	}
	v := celValue(it.list[it.next])
	it.next++
	return v
}

func (it *jsonListIterator) Type() ref.Type { return types.IteratorType }
func (it *jsonListIterator) Value() any     { return nil }
func (it *jsonListIterator) Equal(other ref.Val) ref.Val {
	return types.Bool(other == ref.Val(it))
}
func (it *jsonListIterator) ConvertToType(t ref.Type) ref.Val {
	return types.NewErr("type conversion error from '%s' to '%s'", types.IteratorType, t)
}
func (it *jsonListIterator) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from iterator to '%v'", t)
}
