package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// ctxAdmitter reports the deadline of the context each request is
// admitted under.
type ctxAdmitter struct {
	fakeAdmitter
	left time.Duration
	ok   bool
}

func (c *ctxAdmitter) Validate(ctx context.Context, r *webhook.Request) *webhook.Verdict {
	d, ok := ctx.Deadline()
	c.left, c.ok = time.Until(d), ok
	return &webhook.Verdict{Allowed: true}
}

// Every admission runs under a deadline: what the caller's timeout query
// parameter leaves (the apiserver sends what is left of timeoutSeconds),
// less a margin for the answer's way back; the handler's own timeout when
// the caller names none or one that does not parse.
func TestAdmissionRunsUnderTheCallersDeadline(t *testing.T) {
	for _, tc := range []struct {
		query string
		def   time.Duration
		want  time.Duration
	}{
		{query: "?timeout=5s", want: 4 * time.Second},
		{query: "?timeout=30s", want: 29 * time.Second},
		{query: "?timeout=1s", want: 800 * time.Millisecond},
		{query: "?timeout=300ms", want: 200 * time.Millisecond},
		{query: "?timeout=150ms", want: 75 * time.Millisecond},
		{query: "", want: 9 * time.Second},
		{query: "", def: 2 * time.Second, want: 1600 * time.Millisecond},
		{query: "?timeout=bogus", want: 9 * time.Second},
		{query: "?timeout=-3s", want: 9 * time.Second},
	} {
		t.Run(tc.query+"/"+tc.def.String(), func(t *testing.T) {
			a := &ctxAdmitter{}
			h := &Handler{Mode: Validating, Admitter: a, Log: logr.Discard(), Timeout: tc.def}
			req := httptest.NewRequest(http.MethodPost, "/validate"+tc.query, bytes.NewReader(review(t, admissionv1.Create, false)))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
			}
			if !a.ok {
				t.Fatal("the admission ran without a deadline")
			}
			// The request took a moment between the deadline's start and
			// the admitter's reading of it.
			if a.left > tc.want || a.left < tc.want-200*time.Millisecond {
				t.Errorf("admitted with %v left, want %v (less the moment the request took)", a.left, tc.want)
			}
		})
	}
}
