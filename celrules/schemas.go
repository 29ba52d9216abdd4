package celrules

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/shepherd-k8s/shepherd/deploy/crds"
)

// kindInfo is what the engine needs to know about a kind it has a schema for.
type kindInfo struct {
	resource   string
	versions   []string
	namespaced bool
}

// Schemas resolves the structural schemas of shepherd's CRDs (embedded from
// deploy/crds, the generated source of truth) for type-checking, the way a
// kube-apiserver resolves them from its published OpenAPI: the CRD schema
// with apiVersion, kind and a full ObjectMeta at the root.
type Schemas struct {
	byGVK  map[schema.GroupVersionKind]*spec.Schema
	kinds  map[schema.GroupKind]kindInfo
	mapper *meta.DefaultRESTMapper
}

var _ resolver.SchemaResolver = (*Schemas)(nil)

var (
	schemasOnce sync.Once
	schemasVal  *Schemas
	schemasErr  error
)

// LoadSchemas parses the embedded CRDs once.
func LoadSchemas() (*Schemas, error) {
	schemasOnce.Do(func() { schemasVal, schemasErr = loadSchemas(crds.FS) })
	return schemasVal, schemasErr
}

func loadSchemas(fsys fs.FS) (*Schemas, error) {
	objectMeta, err := objectMetaSchema()
	if err != nil {
		return nil, err
	}
	s := &Schemas{
		byGVK:  map[schema.GroupVersionKind]*spec.Schema{},
		kinds:  map[schema.GroupKind]kindInfo{},
		mapper: meta.NewDefaultRESTMapper(nil),
	}
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return nil, fmt.Errorf("parsing CRD %s: %w", f, err)
		}
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
