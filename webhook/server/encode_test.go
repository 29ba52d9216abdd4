package server

import (
	"encoding/json"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/webhook/jsonvalue"
)

// The hand-written encoders write exactly what encoding/json writes.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	awkward := "quote\" backslash\\ <html> & tab\t newline\n nul\x00 é 日本 \u2028 bad\xff utf8"
	value, err := jsonvalue.Value([]byte(`{"b":[1,-2.5,1e300,"x",null,true,{"z":{},"a":[]}],"a":"<&>","ü":12345678901234}`))
	if err != nil {
		t.Fatal(err)
	}
	patches := map[string][]jsonpatch.JsonPatchOperation{
		"empty":   {},
		"scalars": {jsonpatch.NewOperation("add", "/spec/workloadType", "Inference"), jsonpatch.NewOperation("replace", "/spec/n", int64(3)), jsonpatch.NewOperation("add", "/spec/b", false)},
		"null values": {jsonpatch.NewOperation("add", "/a", nil), jsonpatch.NewOperation("replace", "/b", nil),
			jsonpatch.NewOperation("remove", "/c", nil)},
		"nested":  {jsonpatch.NewOperation("add", "/spec/trainingSpec", map[string]any{"maxRestarts": int64(0)}), jsonpatch.NewOperation("add", "/x", value)},
		"escapes": {jsonpatch.NewOperation("add", "/metadata/labels/a~1b", awkward)},
		"floats":  {jsonpatch.NewOperation("add", "/f", 0.1), jsonpatch.NewOperation("add", "/g", 1e21), jsonpatch.NewOperation("add", "/h", float64(3))},
	}
	for name, ops := range patches {
		t.Run("patch/"+name, func(t *testing.T) {
			sameAsEncodingJSON(t, ops, func() ([]byte, error) { return encodePatch(nil, ops) })
		})
	}
	pt := admissionv1.PatchTypeJSONPatch
	for name, resp := range map[string]*admissionv1.AdmissionResponse{
		"allowed":        {UID: "3b1f", Allowed: true},
		"odd uid":        {UID: types.UID(awkward), Allowed: true},
		"warnings":       {UID: "u", Allowed: true, Warnings: []string{"spec.x: deprecated", awkward}},
		"patch":          {UID: "u", Allowed: true, Patch: []byte(`[{"op":"add","path":"/a","value":1}]`), PatchType: &pt, Warnings: []string{"w"}},
		"denied":         {UID: "u", Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure, Code: 422, Message: "no <way>"}},
		"audit":          {UID: "u", Allowed: true, AuditAnnotations: map[string]string{"k": "v"}},
		"empty warnings": {UID: "u", Allowed: true, Warnings: []string{}},
	} {
		t.Run("review/"+name, func(t *testing.T) {
			rv := &admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
				Response: resp,
			}
			sameAsEncodingJSON(t, rv, func() ([]byte, error) { return encodeReview(nil, resp) })
		})
	}
}

// sameAsEncodingJSON checks that encode writes exactly what encoding/json
// writes for v.
func sameAsEncodingJSON(t *testing.T, v any, encode func() ([]byte, error)) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("hand-written encoding:\n got %s\nwant %s", got, want)
	}
}
