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
	rv, err := decodeReview(body, new(exchange))
	if err != nil {
		return nil, err
	}
	for _, o := range []struct {
		value map[string]any
		raw   *[]byte
	}{{rv.object, &rv.Request.Object.Raw}, {rv.oldObject, &rv.Request.OldObject.Raw}} {
		if o.value != nil {
			if *o.raw, err = json.Marshal(o.value); err != nil {
				return nil, malformed(err)
			}
		}
	}
	return rv.AdmissionReview, nil
}

// decodeReview reads the review in one pass of a jsonvalue.Scanner: the
// envelope's few fields go straight into the typed request, each
// type-checked, and only the objects are decoded into maps. (Decoding the
// envelope into maps first cost as much as decoding a typical object, and
// the reflection-driven decoder before that more than the rules.)
func decodeReview(body []byte, x *exchange) (*decodedReview, error) {
	if len(body) == 0 {
		return nil, errors.New("malformed AdmissionReview: the request body is empty")
	}
	s := jsonvalue.NewScanner(body, &x.arena)
	if s.Next() != '{' {
		// Not an object: Object says what it is or where it is malformed,
		// and reads a lone null as no object.
		if _, err := jsonvalue.Object(body); err != nil {
			return nil, malformed(err)
		}
		return nil, errors.New("malformed AdmissionReview: the request body is null")
	}
	// Type errors are kept apart by where they were found, so they are
	// reported in the order the checks below make, whatever the order of
	// the document's fields; a syntax error anywhere comes first.
	var envelope, inRequest, requestField fields
	ar := &x.review
	rv := &x.decoded
	rv.AdmissionReview = ar
	var req *admissionv1.AdmissionRequest
	err := s.Members(func(key string) (err error) {
		switch key {
		case "apiVersion":
			ar.APIVersion, err = envelope.str(s, "", key)
		case "kind":
			ar.Kind, err = envelope.str(s, "", key)
		case "request":
			// The last of duplicate keys wins, as it does in a map.
			req, rv.object, rv.oldObject, inRequest, requestField = nil, nil, nil, fields{}, fields{}
			x.request = admissionv1.AdmissionRequest{}
			r := &x.request
			present, err := inRequest.members(s, "", key, func(k string) error { return requestField.request(s, k, r, rv) })
			if present {
				req = r
			}
			return err
		default:
			_, err = s.Value()
		}
		return err
	})
	if err == nil {
		err = s.End()
	}
	if err != nil {
		return nil, malformed(err)
	}
	if envelope.err != nil {
		return nil, envelope.err
	}
	if ar.GroupVersionKind() != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, fmt.Errorf("malformed AdmissionReview: apiVersion %q, kind %q: want admission.k8s.io/v1 AdmissionReview (list only v1 in the webhook's admissionReviewVersions)",
			ar.APIVersion, ar.Kind)
	}
	if inRequest.err != nil {
		return nil, inRequest.err
	}
	if req == nil {
		return nil, errors.New("malformed AdmissionReview: request is missing")
	}
	if requestField.err != nil {
		return nil, requestField.err
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

func malformed(err error) error { return fmt.Errorf("malformed AdmissionReview: %w", err) }

// request reads the request's field key into r (its objects into rv).
func (d *fields) request(s *jsonvalue.Scanner, key string, r *admissionv1.AdmissionRequest, rv *decodedReview) (err error) {
	const in = "request"
	var str string
	switch key {
	case "uid":
		str, err = d.str(s, in, key)
		r.UID = types.UID(str)
	case "kind":
		r.Kind, _, err = d.gvk(s, key)
	case "requestKind":
		var gvk metav1.GroupVersionKind
		var present bool
		if gvk, present, err = d.gvk(s, key); present {
			r.RequestKind = &gvk
		}
	case "resource":
		r.Resource, _, err = d.gvr(s, key)
	case "requestResource":
		var gvr metav1.GroupVersionResource
		var present bool
		if gvr, present, err = d.gvr(s, key); present {
			r.RequestResource = &gvr
		}
	case "subResource":
		r.SubResource, err = d.str(s, in, key)
	case "requestSubResource":
		r.RequestSubResource, err = d.str(s, in, key)
	case "name":
		r.Name, err = d.str(s, in, key)
	case "namespace":
		r.Namespace, err = d.str(s, in, key)
	case "operation":
		str, err = d.str(s, in, key)
		r.Operation = admissionv1.Operation(str)
	case "userInfo":
		r.UserInfo, err = d.userInfo(s)
	case "dryRun":
		var v any
		if v, err = s.Value(); err != nil || v == nil {
			return err
		}
		b, isBool := v.(bool)
		if !isBool {
			d.fail("request.dryRun", "a boolean", v)
		}
		r.DryRun = &b
	case "object":
		rv.object, r.Object.Raw, err = d.object(s, key)
	case "oldObject":
		rv.oldObject, r.OldObject.Raw, err = d.object(s, key)
	default:
		_, err = s.Value()
	}
	return err
}

// fields reads typed fields off a Scanner, keeping the first type error
// (the value is still read, so the document is checked to its end). Each
// reader takes the path of the object being read ("" for the document) and
// the key: the field's path is joined only for a message, as every request
// reads a couple of dozen fields.
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

// wrongType reads a value of the wrong type and records it.
func (d *fields) wrongType(s *jsonvalue.Scanner, in, key, want string) error {
	v, err := s.Value()
	if err == nil {
		d.fail(at(in, key), want, v)
	}
	return err
}

func (d *fields) str(s *jsonvalue.Scanner, in, key string) (string, error) {
	switch s.Next() {
	case '"':
		return s.String()
	case 'n':
		_, err := s.Value()
		return "", err
	}
	return "", d.wrongType(s, in, key, "a string")
}

// members reads an object member by member; null is absent.
func (d *fields) members(s *jsonvalue.Scanner, in, key string, member func(key string) error) (present bool, err error) {
	switch s.Next() {
	case '{':
		return true, s.Members(member)
	case 'n':
		_, err := s.Value()
		return false, err
	}
	return false, d.wrongType(s, in, key, "an object")
}

func (d *fields) strings(s *jsonvalue.Scanner, in, key string) ([]string, error) {
	v, err := s.Value()
	if err != nil || v == nil {
		return nil, err
	}
	l, ok := v.([]any)
	if !ok {
		d.fail(at(in, key), "an array of strings", v)
		return nil, nil
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			d.fail(fmt.Sprintf("%s[%d]", at(in, key), i), "a string", e)
		}
		out[i] = s
	}
	return out, nil
}

// gvk reads the GroupVersionKind at request.key.
func (d *fields) gvk(s *jsonvalue.Scanner, key string) (metav1.GroupVersionKind, bool, error) {
	v, present, err := d.groupVersion(s, key, "kind")
	return metav1.GroupVersionKind{Group: v[0], Version: v[1], Kind: v[2]}, present, err
}

// gvr reads the GroupVersionResource at request.key.
func (d *fields) gvr(s *jsonvalue.Scanner, key string) (metav1.GroupVersionResource, bool, error) {
	v, present, err := d.groupVersion(s, key, "resource")
	return metav1.GroupVersionResource{Group: v[0], Version: v[1], Resource: v[2]}, present, err
}

// groupVersion reads the group, version and third string of the object at
// request.key, a GroupVersionKind or GroupVersionResource.
func (d *fields) groupVersion(s *jsonvalue.Scanner, key, third string) (v [3]string, present bool, err error) {
	path := requestPath(key)
	present, err = d.members(s, "request", key, func(k string) (err error) {
		switch k {
		case "group":
			v[0], err = d.str(s, path, k)
		case "version":
			v[1], err = d.str(s, path, k)
		case third:
			v[2], err = d.str(s, path, k)
		default:
			_, err = s.Value()
		}
		return err
	})
	return v, present, err
}

// requestPath is the path of the request's field key, without joining
// strings for the four read on every request.
func requestPath(key string) string {
	switch key {
	case "kind":
		return "request.kind"
	case "requestKind":
		return "request.requestKind"
	case "resource":
		return "request.resource"
	case "requestResource":
		return "request.requestResource"
	}
	return "request." + key
}

// userInfo reads request.userInfo.
func (d *fields) userInfo(s *jsonvalue.Scanner) (ui authenticationv1.UserInfo, err error) {
	const in = "request.userInfo"
	_, err = d.members(s, "request", "userInfo", func(k string) (err error) {
		switch k {
		case "username":
			ui.Username, err = d.str(s, in, k)
		case "uid":
			ui.UID, err = d.str(s, in, k)
		case "groups":
			ui.Groups, err = d.strings(s, in, k)
		case "extra":
			ui.Extra = nil
			extra := map[string]authenticationv1.ExtraValue{}
			present, err := d.members(s, in, k, func(name string) error {
				vals, err := d.strings(s, in+".extra", name)
				extra[name] = vals
				return err
			})
			if present {
				ui.Extra = extra
			}
			return err
		default:
			_, err = s.Value()
		}
		return err
	})
	return ui, err
}

// object reads request.object or request.oldObject. Any JSON value other
// than an object or null is kept as raw JSON for the chain to deny with its
// decode error, as it would deny it coming from encoding/json.
func (d *fields) object(s *jsonvalue.Scanner, key string) (map[string]any, []byte, error) {
	v, err := s.Value()
	if err != nil || v == nil {
		return nil, nil, err
	}
	if o, ok := v.(map[string]any); ok {
		return o, nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		d.fail("request."+key, "JSON", v)
	}
	return nil, b, nil
}

// requestFrom turns the decoded review into the chain's Request.
func (x *exchange) requestFrom() *webhook.Request {
	x.req = requestOf(x.decoded.Request)
	x.req.ObjectValue, x.req.OldObjectValue = x.decoded.object, x.decoded.oldObject
	x.req.PatchScratch = x.patch
	return &x.req
}
