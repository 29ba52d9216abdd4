package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The answers to almost every request — allowed, perhaps with warnings and
// a patch — are written here by hand, byte for byte what encoding/json
// writes (a test holds them to it), without its reflection: encoding is on
// every request's path. Anything else (denials with their Status, audit
// annotations) goes through encoding/json.

// encodeReview appends the AdmissionReview answering with resp to b.
func encodeReview(b []byte, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	if resp.Result != nil || len(resp.AuditAnnotations) > 0 {
		return json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
			Response: resp,
		})
	}
	b = append(b, `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":`...)
	b = appendString(b, string(resp.UID))
	b = append(b, `,"allowed":`...)
	b = strconv.AppendBool(b, resp.Allowed)
	if len(resp.Patch) > 0 {
		b = append(b, `,"patch":"`...)
		b = base64.StdEncoding.AppendEncode(b, resp.Patch)
		b = append(b, '"')
	}
	if resp.PatchType != nil {
		b = append(b, `,"patchType":`...)
		b = appendString(b, string(*resp.PatchType))
	}
	if len(resp.Warnings) > 0 {
		b = append(b, `,"warnings":[`...)
		for i, w := range resp.Warnings {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, w)
		}
		b = append(b, ']')
	}
	return append(b, "}}"...), nil
}

// encodePatch appends a JSON patch to b as encoding/json encodes
// []jsonpatch.JsonPatchOperation.
func encodePatch(b []byte, ops []jsonpatch.JsonPatchOperation) ([]byte, error) {
	b = slices.Grow(b, 2+128*len(ops)) // an op with a short value is about 80 bytes
	b = append(b, '[')
	for i, op := range ops {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"op":`...)
		b = appendString(b, op.Operation)
		b = append(b, `,"path":`...)
		b = appendString(b, op.Path)
		// jsonpatch writes "value" for add and replace even when null,
		// and otherwise only when set.
		if op.Value != nil || op.Operation == "add" || op.Operation == "replace" {
			b = append(b, `,"value":`...)
			var err error
			if b, err = appendValue(b, op.Value); err != nil {
				return nil, fmt.Errorf("%s: %w", op.Path, err)
			}
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendValue appends a decoded JSON value as encoding/json encodes it:
// object keys sorted.
func appendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case string:
		return appendString(b, v), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case map[string]any:
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendValue(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	// float64 and anything else: encoding/json's own formatting.
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// appendString appends s as a JSON string. Printable ASCII other than the
// characters encoding/json escapes (" \ < > &) is copied; any other string
// is left to encoding/json, whose escapes (HTML-safe, U+FFFD for invalid
// UTF-8, \u2028 and \u2029) are then exactly reproduced.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			out, _ := json.Marshal(s) // a string always encodes
			return append(b, out...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
