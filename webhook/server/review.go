package server

import (
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/jsonvalue"
)

// decodedReview is an AdmissionReview: the typed request without its
// objects, and the objects already decoded, so the chain does not parse
// them a second time.
type decodedReview struct {
	*admissionv1.AdmissionReview
	object, oldObject map[string]any
}

// DecodeReview parses an AdmissionReview and checks what the handlers rely
// on; every error is a message for a 400 answer. The request's object and
// oldObject are returned as raw JSON, as encoding/json would give them.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	rv, err := decodeReview(body)
	if err != nil {
		return nil, err
	}
	for _, o := range []struct {
		value map[string]any
		raw   *[]byte
	}{{rv.object, &rv.Request.Object.Raw}, {rv.oldObject, &rv.Request.OldObject.Raw}} {
		if o.value != nil {
			if *o.raw, err = json.Marshal(o.value); err != nil {
				return nil, fmt.Errorf("malformed AdmissionReview: %w", err)
			}
		}
	}
	return rv.AdmissionReview, nil
}

// decodeReview parses the whole review in one pass of jsonvalue (the
// reflection-driven decoder spent more time on the envelope than shepherd
// spends on the rules) and fills the few fields of the typed request by
// hand, each type-checked.
func decodeReview(body []byte) (*decodedReview, error) {
	if len(body) == 0 {
		return nil, errors.New("malformed AdmissionReview: the request body is empty")
	}
	doc, err := jsonvalue.Object(body)
	if err != nil {
		return nil, fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	if doc == nil {
		return nil, errors.New("malformed AdmissionReview: the request body is null")
	}
	d := fields{}
	ar := &admissionv1.AdmissionReview{}
	ar.APIVersion = d.str(doc, "apiVersion", "")
	ar.Kind = d.str(doc, "kind", "")
	if d.err != nil {
		return nil, d.err
	}
	if ar.GroupVersionKind() != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, fmt.Errorf("malformed AdmissionReview: apiVersion %q, kind %q: want admission.k8s.io/v1 AdmissionReview (list only v1 in the webhook's admissionReviewVersions)",
			ar.APIVersion, ar.Kind)
	}
	rm, ok := d.obj(doc, "request", "")
	if !ok || rm == nil {
		if d.err != nil {
			return nil, d.err
		}
		return nil, errors.New("malformed AdmissionReview: request is missing")
	}
	req := &admissionv1.AdmissionRequest{
		UID:                types.UID(d.str(rm, "uid", "request")),
		Kind:               d.gvkOf(d.objOrNil(rm, "kind", "request"), "request.kind"),
		Resource:           d.gvrOf(d.objOrNil(rm, "resource", "request"), "request.resource"),
		SubResource:        d.str(rm, "subResource", "request"),
		RequestSubResource: d.str(rm, "requestSubResource", "request"),
		Name:               d.str(rm, "name", "request"),
		Namespace:          d.str(rm, "namespace", "request"),
		Operation:          admissionv1.Operation(d.str(rm, "operation", "request")),
		UserInfo:           d.userInfo(d.objOrNil(rm, "userInfo", "request"), "request.userInfo"),
	}
	if o, ok := d.obj(rm, "requestKind", "request"); ok {
		gvk := d.gvkOf(o, "request.requestKind")
		req.RequestKind = &gvk
	}
	if o, ok := d.obj(rm, "requestResource", "request"); ok {
		gvr := d.gvrOf(o, "request.requestResource")
		req.RequestResource = &gvr
	}
	if v, ok := rm["dryRun"]; ok && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			d.fail("request.dryRun", "a boolean", v)
		}
		req.DryRun = &b
	}
	rv := &decodedReview{AdmissionReview: ar}
	rv.object = d.object(rm, "object", &req.Object.Raw)
	rv.oldObject = d.object(rm, "oldObject", &req.OldObject.Raw)
	if d.err != nil {
		return nil, d.err
	}
	ar.Request = req
	switch {
	case req.UID == "":
		return nil, errors.New("malformed AdmissionReview: request.uid is missing")
	case req.Kind.Kind == "":
		return nil, errors.New("malformed AdmissionReview: request.kind is missing")
	case req.Operation == "":
		return nil, errors.New("malformed AdmissionReview: request.operation is missing")
	}
	return rv, nil
}

// fields reads typed fields out of decoded JSON, keeping the first type
// error. Each reader takes the map, the key and the map's own path (""
// for the document): the field's path is joined only for a message, as
// every request reads a couple of dozen fields.
type fields struct{ err error }

func (d *fields) fail(path, want string, got any) {
	if d.err == nil {
		d.err = fmt.Errorf("malformed AdmissionReview: %s: want %s, got %s", path, want, jsonvalue.KindOf(got))
	}
}

// at is the path of key in the object at path in.
func at(in, key string) string {
	if in == "" {
		return key
	}
	return in + "." + key
}

func (d *fields) str(m map[string]any, key, in string) string {
	v, ok := m[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.fail(at(in, key), "a string", v)
	}
	return s
}

func (d *fields) obj(m map[string]any, key, in string) (map[string]any, bool) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, false
	}
	o, ok := v.(map[string]any)
	if !ok {
		d.fail(at(in, key), "an object", v)
		return nil, false
	}
	return o, true
}

// objOrNil is obj without the presence flag.
func (d *fields) objOrNil(m map[string]any, key, in string) map[string]any {
	o, _ := d.obj(m, key, in)
	return o
}

func (d *fields) strings(m map[string]any, key, in string) []string {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		d.fail(at(in, key), "an array of strings", v)
		return nil
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			d.fail(fmt.Sprintf("%s[%d]", at(in, key), i), "a string", e)
		}
		out[i] = s
	}
	return out
}

// gvkOf reads the GroupVersionKind o, found at path.
func (d *fields) gvkOf(o map[string]any, path string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: d.str(o, "group", path), Version: d.str(o, "version", path), Kind: d.str(o, "kind", path)}
}

// gvrOf reads the GroupVersionResource o, found at path.
func (d *fields) gvrOf(o map[string]any, path string) metav1.GroupVersionResource {
	return metav1.GroupVersionResource{Group: d.str(o, "group", path), Version: d.str(o, "version", path), Resource: d.str(o, "resource", path)}
}

// userInfo reads the UserInfo o, found at path.
func (d *fields) userInfo(o map[string]any, path string) authenticationv1.UserInfo {
	ui := authenticationv1.UserInfo{
		Username: d.str(o, "username", path),
		UID:      d.str(o, "uid", path),
		Groups:   d.strings(o, "groups", path),
	}
	if extra, ok := d.obj(o, "extra", path); ok {
		in := at(path, "extra")
		ui.Extra = make(map[string]authenticationv1.ExtraValue, len(extra))
		for k := range extra {
			ui.Extra[k] = d.strings(extra, k, in)
		}
	}
	return ui
}

// object returns an embedded object. Any other JSON value is kept as raw
// JSON for the chain to deny with its decode error, as it would deny it
// coming from encoding/json.
func (d *fields) object(m map[string]any, key string, raw *[]byte) map[string]any {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	if o, ok := v.(map[string]any); ok {
		return o
	}
	b, err := json.Marshal(v)
	if err != nil {
		d.fail("request."+key, "JSON", v)
	}
	*raw = b
	return nil
}

// requestFrom turns a decoded review into the chain's Request.
func requestFrom(rv *decodedReview) *webhook.Request {
	req := RequestFrom(rv.Request)
	req.ObjectValue, req.OldObjectValue = rv.object, rv.oldObject
	return req
}
