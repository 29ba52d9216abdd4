package integrations_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/api"
	. "github.com/shepherd-k8s/shepherd/integrations"
)

// logLines is a logger that keeps what it logs, one line per call.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// gauge is the value of metric name with label=value in controller-runtime's
// registry, where shepherd exports its metrics.
func gauge(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, label, value) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestEnforcementDecides: off never enforces, on always, auto unless the
// upstream operator is seen doing it; Status and the metric say the same.
func TestEnforcementDecides(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setting    Mode // "" leaves the feature out of the settings
		upstream   bool
		want       bool
		wantStatus string
	}{
		{name: "unset is auto, nothing upstream", want: true, wantStatus: "shepherd"},
		{name: "auto, nothing upstream", setting: ModeAuto, want: true, wantStatus: "shepherd"},
		{name: "auto, upstream enforces", setting: ModeAuto, upstream: true, wantStatus: "upstream (Trainer v2.2 is installed)"},
		{name: "on, upstream enforces", setting: ModeOn, upstream: true, want: true, wantStatus: "shepherd"},
		{name: "off", setting: ModeOff, wantStatus: "off"},
		{name: "off, upstream enforces", setting: ModeOff, upstream: true, wantStatus: "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := map[Feature]Mode{}
			if tc.setting != "" {
				settings[FeatureDeadline] = tc.setting
			}
			e := NewEnforcement(logr.Discard(), settings)
			e.SetUpstream(FeatureDeadline, tc.upstream, "Trainer v2.2 is installed")
			if got := e.Enforces(FeatureDeadline); got != tc.want {
				t.Errorf("Enforces = %v, want %v", got, tc.want)
			}
			wantSetting := tc.setting
			if wantSetting == "" {
				wantSetting = ModeAuto
			}
			if got := e.Setting(FeatureDeadline); got != wantSetting {
				t.Errorf("Setting = %q, want %q", got, wantSetting)
			}
			want := map[Feature]string{FeatureDeadline: tc.wantStatus, FeatureGangTermination: "shepherd"}
			if diff := cmp.Diff(want, e.Status()); diff != "" {
				t.Errorf("Status (-want +got):\n%s", diff)
			}
			wantGauge := 0.0
			if tc.want {
				wantGauge = 1
			}
			if got := gauge(t, "shepherd_feature_enforced", "feature", string(FeatureDeadline)); got != wantGauge {
				t.Errorf("shepherd_feature_enforced = %v, want %v", got, wantGauge)
			}
		})
	}
}

// A setting of "" is auto, as one left out is.
func TestEnforcementEmptySettingIsAuto(t *testing.T) {
	e := NewEnforcement(logr.Discard(), map[Feature]Mode{FeatureDeadline: ""})
	if got := e.Setting(FeatureDeadline); got != ModeAuto {
		t.Errorf("Setting = %q, want auto", got)
	}
	e.SetUpstream(FeatureDeadline, true, "Trainer v2.2")
	if e.Enforces(FeatureDeadline) {
		t.Error(`a setting of "" did not stand down for the upstream operator, as auto does`)
	}
}

// A nil Enforcement (no settings given) enforces every feature.
func TestNilEnforcementEnforcesEverything(t *testing.T) {
	var e *Enforcement
	e.SetUpstream(FeatureDeadline, true, "ignored")
	for _, f := range Features {
		if !e.Enforces(f) || e.Setting(f) != ModeAuto {
			t.Errorf("%s: enforces %v, setting %q; want true, auto", f, e.Enforces(f), e.Setting(f))
		}
	}
	if s := e.Status(); len(s) != 0 {
		t.Errorf("Status = %v, want empty", s)
	}
}

// A decision is logged when it changes, not at every SetUpstream; a
// setting of on beside an upstream operator that enforces too is warned of.
func TestEnforcementLogsChanges(t *testing.T) {
	var logs logLines
	e := NewEnforcement(logs.logger(), map[Feature]Mode{FeatureGangTermination: ModeOn})
	// on is logged at start, whatever upstream does; auto is not.
	if n := logs.count(`"feature"="gang-termination"`); n != 1 {
		t.Errorf("gang-termination (on) logged %d times at start, want 1", n)
	}
	if n := logs.count(`"feature"="trainjob-deadline"`); n != 0 {
		t.Errorf("trainjob-deadline (auto) logged %d times at start, want 0", n)
	}
	for range 3 {
		e.SetUpstream(FeatureDeadline, false, "no sign")
	}
	if n := logs.count(`"feature"="trainjob-deadline"`); n != 1 {
		t.Errorf("the same decision three times logged %d times, want 1", n)
	}
	e.SetUpstream(FeatureDeadline, true, "Trainer v2.2")
	if n := logs.count(`"upstreamEnforces"=true`); n != 1 {
		t.Errorf("a changed decision logged %d times, want 1", n)
	}
	if n := logs.count("warning: the upstream operator enforces this feature too"); n != 0 {
		t.Errorf("auto warned of a double enforcement %d times", n)
	}
	e.SetUpstream(FeatureGangTermination, true, "Grove writes MinAvailableBreached")
	if n := logs.count("warning: the upstream operator enforces this feature too"); n != 1 {
		t.Errorf("on beside an enforcing upstream warned %d times, want 1", n)
	}
	if !e.Enforces(FeatureGangTermination) {
		t.Error("on stood down for the upstream operator")
	}
}

func TestParseFeatureSettings(t *testing.T) {
	got, err := ParseFeatureSettings(map[string]string{"trainjob-deadline": "Off", "gang-termination": " on"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[Feature]Mode{FeatureDeadline: ModeOff, FeatureGangTermination: ModeOn}, got); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	if got, err := ParseFeatureSettings(nil); err != nil || len(got) != 0 {
		t.Errorf("no pairs: %v, %v", got, err)
	}
	for _, tc := range []struct {
		pairs map[string]string
		want  string
	}{
		{map[string]string{"ttl": "on"}, `unknown feature "ttl": want one of [trainjob-deadline gang-termination]`},
		// Of several mistakes the first by name is reported, every time.
		{map[string]string{"zz": "on", "aa": "on"}, `unknown feature "aa"`},
		{map[string]string{"gang-termination": "sometimes"}, `feature gang-termination: invalid framework mode "sometimes": want auto, on or off`},
	} {
		if _, err := ParseFeatureSettings(tc.pairs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFeatureSettings(%v) = %v, want an error containing %q", tc.pairs, err, tc.want)
		}
	}
}

// SetUpstreamFrom asks every registered framework: Trainer's deadline is
// upstream's on schemas whose TrainJob has activeDeadlineSeconds, and
// shepherd's again when they lose it.
func TestSetUpstreamFromTheRegisteredFrameworks(t *testing.T) {
	e := NewEnforcement(logr.Discard(), nil)
	trainJob := schema.GroupKind{Group: api.TrainerGroup, Kind: api.KindTrainJob}
	e.SetUpstreamFrom(schemaFields{trainJob: {"spec.activeDeadlineSeconds"}})
	if e.Enforces(FeatureDeadline) {
		t.Error("shepherd enforces the deadline on schemas where Trainer does")
	}
	if s := e.Status()[FeatureDeadline]; !strings.HasPrefix(s, "upstream (the served TrainJob schema has spec.activeDeadlineSeconds") {
		t.Errorf("status = %q", s)
	}
	if !e.Enforces(FeatureGangTermination) {
		t.Error("gang termination, decided per object, was handed upstream")
	}
	e.SetUpstreamFrom(schemaFields{})
	if !e.Enforces(FeatureDeadline) {
		t.Error("shepherd does not enforce the deadline once the schema lost the field")
	}
}

// schemaFields is a knob.FieldSchemas holding the listed field paths.
type schemaFields map[schema.GroupKind][]string

func (s schemaFields) HasField(gk schema.GroupKind, path []string) bool {
	for _, p := range s[gk] {
		if p == strings.Join(path, ".") {
			return true
		}
	}
	return false
}
