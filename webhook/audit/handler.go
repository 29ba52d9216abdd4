package audit

import (
	"encoding/json"
	"net/http"

	"k8s.io/utils/clock"
)

// Handler serves the ring at /audit as a List, filtered by the URL
// parameters namespace, rule, user, since (RFC 3339 or a duration) and limit.
// It is mounted on the metrics server, whose authentication and
// authorization filter guards it.
type Handler struct {
	Ring  *Ring
	Clock clock.PassiveClock
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "only GET is supported on /audit", http.StatusMethodNotAllowed)
		return
	}
	clk := h.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	q, err := ParseQuery(r.URL.Query(), clk.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	// An encoding error here is the client going away; there is nobody left
	// to tell.
	_ = json.NewEncoder(w).Encode(List{Items: h.Ring.Query(q)})
}
