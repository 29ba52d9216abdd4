package integrations

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Feature is a lifecycle feature that an upstream operator may already
// implement itself. shepherd never enforces one twice: where the upstream
// operator does it (Setting auto and the cluster shows it), shepherd keeps
// its admission rules and audit but writes no condition, emits no Event and
// deletes nothing for that feature.
type Feature string

const (
	// FeatureDeadline is TrainJob activeDeadlineSeconds enforcement
	// (KEP-2899). Trainer v2.2+ enforces it itself; its TrainJob CRD
	// carrying spec.activeDeadlineSeconds is the sign.
	FeatureDeadline Feature = "trainjob-deadline"
	// FeatureGangTermination is Grove's gang termination: PodClique
	// MinAvailableBreached and the terminations it drives. Grove writes
	// that condition itself; a MinAvailableBreached condition owned by
	// another field manager (managedFields) is the sign.
	FeatureGangTermination Feature = "gang-termination"
)

// Features lists every feature with a setting, for flags and docs.
var Features = []Feature{FeatureDeadline, FeatureGangTermination}

var featureEnforced = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "shepherd_feature_enforced",
	Help: "1 when shepherd enforces a lifecycle feature itself, 0 when it stands down because the upstream operator does (or the feature is off).",
}, []string{"feature"})

func init() {
	metrics.Registry.MustRegister(featureEnforced)
}

// Enforcement decides, per feature, whether shepherd enforces it: off never,
// on always, auto unless the upstream operator is seen doing it. It is safe
// for concurrent use; reconcilers ask it on every decision.
type Enforcement struct {
	log logr.Logger

	mu       sync.RWMutex
	settings map[Feature]Mode
	upstream map[Feature]bool
	reason   map[Feature]string
}

// NewEnforcement starts with no upstream operator seen. Features missing
// from settings are auto.
func NewEnforcement(log logr.Logger, settings map[Feature]Mode) *Enforcement {
	e := &Enforcement{log: log, settings: map[Feature]Mode{}, upstream: map[Feature]bool{}, reason: map[Feature]string{}}
	for _, f := range Features {
		m, ok := settings[f]
		if !ok || m == "" {
			m = ModeAuto
		}
		e.settings[f] = m
		e.report(f)
	}
	return e
}

// Enforces reports whether shepherd enforces f now.
func (e *Enforcement) Enforces(f Feature) bool {
	if e == nil {
		return true
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.enforces(f)
}

func (e *Enforcement) enforces(f Feature) bool {
	switch e.settings[f] {
	case ModeOff:
		return false
	case ModeOn:
		return true
	}
	return !e.upstream[f]
}

// Setting is f's configured setting.
func (e *Enforcement) Setting(f Feature) Mode {
	if e == nil {
		return ModeAuto
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.settings[f]
}

// SetUpstream records whether the upstream operator implements f, and why
// shepherd thinks so; a change is logged with the resulting decision.
func (e *Enforcement) SetUpstream(f Feature, upstream bool, reason string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	changed := e.upstream[f] != upstream || e.reason[f] == ""
	e.upstream[f], e.reason[f] = upstream, reason
	e.mu.Unlock()
	if changed {
		e.report(f)
	}
}

// report logs and exports the decision for f.
func (e *Enforcement) report(f Feature) {
	e.mu.RLock()
	enforces, setting, upstream, reason := e.enforces(f), e.settings[f], e.upstream[f], e.reason[f]
	e.mu.RUnlock()
	v := 0.0
	if enforces {
		v = 1
	}
	featureEnforced.WithLabelValues(string(f)).Set(v)
	if reason != "" || setting != ModeAuto {
		e.log.Info("feature enforcement decided", "feature", f, "setting", setting, "upstreamEnforces", upstream, "shepherdEnforces", enforces, "why", reason)
	}
	if setting == ModeOn && upstream {
		// Both act: harmless for the deadline (Trainer and shepherd write
		// the same Failed condition and whoever is second finds the job
		// finished), but an admin who set on should know that auto would
		// leave it to the operator.
		e.log.Info("warning: the upstream operator enforces this feature too; shepherd enforces it as well because its setting is on (set it to auto to stand down)",
			"feature", f, "why", reason)
	}
}

// Status is the decision for every feature, for /readyz-style endpoints:
// feature -> "shepherd" or "upstream (why)" or "off".
func (e *Enforcement) Status() map[Feature]string {
	out := map[Feature]string{}
	if e == nil {
		return out
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, f := range Features {
		switch {
		case e.settings[f] == ModeOff:
			out[f] = "off"
		case e.enforces(f):
			out[f] = "shepherd"
		default:
			out[f] = fmt.Sprintf("upstream (%s)", e.reason[f])
		}
	}
	return out
}

// ParseFeatureSettings parses "feature=mode" pairs.
func ParseFeatureSettings(pairs map[string]string) (map[Feature]Mode, error) {
	out := map[Feature]Mode{}
	for _, k := range slices.Sorted(maps.Keys(pairs)) {
		known := false
		for _, f := range Features {
			known = known || string(f) == k
		}
		if !known {
			return nil, fmt.Errorf("unknown feature %q: want one of %v", k, Features)
		}
		m, err := ParseMode(pairs[k])
		if err != nil {
			return nil, fmt.Errorf("feature %s: %w", k, err)
		}
		out[Feature(k)] = m
	}
	return out, nil
}
