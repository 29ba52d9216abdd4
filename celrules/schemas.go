package celrules

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	extopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// kindInfo is what the engine needs to know about a kind it has a schema for.
type kindInfo struct {
	resource   string
	versions   []string
	namespaced bool
}

// Schemas resolves the structural schemas of a set of CRDs for
// type-checking, the way a kube-apiserver resolves them from its published
// OpenAPI: the CRD schema with apiVersion, kind and a full ObjectMeta at the
// root. The set is what the target cluster serves: on a cluster, the CRDs it
// has established (a custom resource's published OpenAPI v3 is generated
// from exactly that schema, and reading the CRD avoids the publication lag
// after an install or upgrade); offline, CRD files given with --crd or the
// pinned upstream set (integrations/pinned).
type Schemas struct {
	byGVK map[schema.GroupVersionKind]*spec.Schema
	// structural are the same schemas as the apiserver prunes with.
	structural map[schema.GroupVersionKind]*structuralschema.Structural
	kinds      map[schema.GroupKind]kindInfo
	mapper     *meta.DefaultRESTMapper
	// Source says where the schemas came from, for logs and messages.
	Source string
	// crds identifies the CRDs they were read from (Of).
	crds string

	// The built-in library compiled against these schemas, once.
	builtinsOnce sync.Once
	builtins     []*compiledRule
	inactive     map[string]string
	builtinsErr  error

	// typeContexts are the type-checking contexts of the rules without
	// variables, by the resources they match (typeContext).
	typeContextsMu sync.Mutex
	typeContexts   map[string]*validating.TypeCheckingContext
}

var _ resolver.SchemaResolver = (*Schemas)(nil)

var (
	schemasOnce sync.Once
	schemasVal  *Schemas
	schemasErr  error
)

// PinnedSchemas returns the schemas of the pinned upstream CRDs (Trainer and
// JobSet of the versions go.mod pins, the Grove mirror), parsed once and
// kept for the life of the process: what `check` and `export` type-check
// against when given no --crd.
func PinnedSchemas() (*Schemas, error) {
	schemasOnce.Do(func() { schemasVal, schemasErr = LoadPinnedSchemas() })
	return schemasVal, schemasErr
}

// LoadPinnedSchemas parses the pinned upstream CRDs anew, for a caller that
// uses them only until it has the cluster's own (serve): unlike
// PinnedSchemas nothing keeps them, so once the caller lets go they and
// the built-ins compiled against them (some 20 MB) are freed.
func LoadPinnedSchemas() (*Schemas, error) {
	crds, err := pinned.CRDs()
	if err != nil {
		return nil, err
	}
	return NewSchemas(crds, fmt.Sprintf("pinned upstream CRDs (Trainer %s, JobSet %s, %s)", pinned.TrainerVersion, pinned.JobSetVersion, pinned.GroveAPI))
}

// Of reports whether s were read from exactly these CRDs, as they are now
// (same objects, same generation: the schemas cannot differ), so that
// reading them again can be skipped.
func (s *Schemas) Of(crds []*apiextensionsv1.CustomResourceDefinition) bool {
	return s != nil && s.crds == crdsKey(crds)
}

// crdsKey names each CRD by UID and generation, which changes with its spec.
func crdsKey(crds []*apiextensionsv1.CustomResourceDefinition) string {
	keys := make([]string, 0, len(crds))
	for _, c := range crds {
		keys = append(keys, fmt.Sprintf("%s/%s/%d", c.Name, c.UID, c.Generation))
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// NewSchemas indexes the served versions of crds; source names them.
func NewSchemas(crds []*apiextensionsv1.CustomResourceDefinition, source string) (*Schemas, error) {
	objectMeta, err := objectMetaSchema()
	if err != nil {
		return nil, err
	}
	s := &Schemas{
		byGVK:      map[schema.GroupVersionKind]*spec.Schema{},
		kinds:      map[schema.GroupKind]kindInfo{},
		structural: map[schema.GroupVersionKind]*structuralschema.Structural{},
		mapper:     meta.NewDefaultRESTMapper(nil),
		Source:     source,
		crds:       crdsKey(crds),
	}
	for _, crd := range crds {
		f := crd.Name
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		info := kindInfo{resource: crd.Spec.Names.Plural, namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped}
		for _, v := range crd.Spec.Versions {
			if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			raw, err := json.Marshal(v.Schema.OpenAPIV3Schema)
			if err != nil {
				return nil, err
			}
			var sch spec.Schema
			if err := json.Unmarshal(raw, &sch); err != nil {
				return nil, fmt.Errorf("converting the schema of CRD %s: %w", f, err)
			}
			if sch.Properties == nil {
				sch.Properties = map[string]spec.Schema{}
			}
			sch.Properties["metadata"] = *objectMeta
			sch.Properties["apiVersion"] = *spec.StringProperty()
			sch.Properties["kind"] = *spec.StringProperty()
			gvk := gk.WithVersion(v.Name)
			s.byGVK[gvk] = &sch
			if st, err := structuralOf(v.Schema.OpenAPIV3Schema); err == nil {
				s.structural[gvk] = st
			}
			info.versions = append(info.versions, v.Name)
			scope := meta.RESTScopeRoot
			if info.namespaced {
				scope = meta.RESTScopeNamespace
			}
			s.mapper.AddSpecific(gvk, gvk.GroupVersion().WithResource(info.resource),
				gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind)), scope)
		}
		s.kinds[gk] = info
	}
	return s, nil
}

// objectMetaSchema is metav1.ObjectMeta's OpenAPI schema with its references
// resolved, as the apiserver publishes it for every custom resource.
func objectMetaSchema() (*spec.Schema, error) {
	defs := extopenapi.GetOpenAPIDefinitions(spec.MustCreateRef)
	return resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
		d, ok := defs[ref]
		if !ok {
			return nil, false
		}
		sch := d.Schema
		return &sch, true
	}, metav1.ObjectMeta{}.OpenAPIModelName())
}

// ResolveSchema implements resolver.SchemaResolver.
func (s *Schemas) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	sch, ok := s.byGVK[gvk]
	if !ok {
		return nil, fmt.Errorf("no schema for %v: %w", gvk, resolver.ErrSchemaNotFound)
	}
	return sch, nil
}

// RESTMapper maps the resources of shepherd's CRDs to kinds.
func (s *Schemas) RESTMapper() meta.RESTMapper { return s.mapper }

// Resource returns the plural resource of a kind, falling back to the
// conventional lower-case plural for kinds shepherd has no CRD for.
func (s *Schemas) Resource(gk schema.GroupKind) string {
	if info, ok := s.kinds[gk]; ok {
		return info.resource
	}
	plural, _ := meta.UnsafeGuessKindToResource(gk.WithVersion(""))
	return plural.Resource
}

// Versions returns the served versions of a kind shepherd has a CRD for.
func (s *Schemas) Versions(gk schema.GroupKind) []string { return s.kinds[gk].versions }

// KindForResource maps a plural resource of a group back to its kind.
func (s *Schemas) KindForResource(gr schema.GroupResource) (string, bool) {
	for gk, info := range s.kinds {
		if gk.Group == gr.Group && info.resource == gr.Resource {
			return gk.Kind, true
		}
	}
	return "", false
}

// HasField reports whether the schema of gk (any served version) has path;
// "[]" steps into a list's items. It decides a knob's form
// (integrations/knob): a field the schema lacks would be pruned.
func (s *Schemas) HasField(gk schema.GroupKind, path []string) bool {
	for _, v := range s.kinds[gk].versions {
		if schemaHas(s.byGVK[gk.WithVersion(v)], path) {
			return true
		}
	}
	return false
}

func schemaHas(sch *spec.Schema, path []string) bool {
	for _, p := range path {
		if sch == nil {
			return false
		}
		if p == "[]" {
			if sch.Items == nil || sch.Items.Schema == nil {
				return false
			}
			sch = sch.Items.Schema
			continue
		}
		next, ok := sch.Properties[p]
		if !ok {
			return false
		}
		sch = &next
	}
	return sch != nil
}

func structuralOf(props *apiextensionsv1.JSONSchemaProps) (*structuralschema.Structural, error) {
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		return nil, err
	}
	return structuralschema.NewStructural(internal)
}

// Prune does to obj (decoded JSON, changed in place) what the apiserver
// does when it decodes a custom resource of gvk, before any admission
// webhook sees it: it drops every field the schema does not have, returning
// their paths, and applies the schema's defaults (Grove's CRD defaults a
// scaling group's minAvailable, JobSet's a replicatedJob's groupName).
// Under kubectl's default (Strict) field validation the apiserver rejects
// an object with unknown fields instead; under Warn it drops them with a
// warning. Kinds without a schema here are left alone.
func (s *Schemas) Prune(gvk schema.GroupVersionKind, obj map[string]any) []string {
	st, ok := s.structural[gvk]
	if !ok {
		return nil
	}
	unknown := pruning.PruneWithOptions(obj, st, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	defaulting.Default(obj, st)
	return unknown
}
