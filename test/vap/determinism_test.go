package vap

import (
	"fmt"
	"strings"
	"testing"
)

const (
	offlineRepetitions = 50
	webhookRepetitions = 20
)

// TestVerdictStableUnderRepetition: the same request gives the same verdict
// — allowed or not, the same rules, the same messages — every time, through
// one chain (from its very first evaluation) and through the webhook, with
// the policies of the many-all-exists case: fifteen, ranging all() and
// exists() over the args, each within its own budget and over one budget
// together — what the old engine answered DENIED on a cold chain and
// allowed once its combined program was compiled. Every verdict is also
// the exported VAPs'.
func TestVerdictStableUnderRepetition(t *testing.T) {
	f := parityFixture(t)
	pc := f.byName[manyCase]
	if len(pc.scoped) < 12 {
		t.Fatalf("%s has %d policies: the test wants at least 12", manyCase, len(pc.scoped))
	}
	for _, pr := range pc.requests {
		t.Run(pr.name, func(t *testing.T) {
			want := pc.vapVerdict(t, pr.viaAPIServer(phaseVAP))

			// A chain of its own: its first evaluation is the one a cold
			// `shepherd check` gives.
			chain := seedChain(t, pc.lookups...)
			for _, p := range pc.scoped {
				if errs := chain.SetPolicy(p); len(errs) > 0 {
					t.Fatalf("WorkloadPolicy %s does not compile: %v", p.Name, errs.ToAggregate())
				}
			}
			offline := tally{}
			for range offlineRepetitions {
				offline.add(pc.offlineVerdict(t, chain, pr))
			}
			hooked := tally{}
			for range webhookRepetitions {
				hooked.add(pc.webhookVerdict(t, pr.viaAPIServer(phaseWebhook)))
			}
			for _, got := range []struct {
				who string
				t   tally
			}{{"shepherd check (one chain)", offline}, {"the webhook", hooked}} {
				if len(got.t.verdicts) != 1 {
					t.Errorf("%s gave %d different verdicts for one request: %s", got.who, len(got.t.verdicts), got.t)
					continue
				}
				if v := got.t.verdicts[0]; v.allowed != want.allowed {
					t.Errorf("%s says %s every time, the exported VAP %s", got.who, v, want)
				}
			}
		})
	}
}

// tally counts the distinct verdicts of repeated evaluations, in the order
// they first appeared.
type tally struct {
	verdicts []verdict
	counts   []int
	first    []int
	n        int
}

func (t *tally) add(v verdict) {
	t.n++
	for i, seen := range t.verdicts {
		if seen.equal(v) {
			t.counts[i]++
			return
		}
	}
	t.verdicts = append(t.verdicts, v)
	t.counts = append(t.counts, 1)
	t.first = append(t.first, t.n)
}

func (t tally) String() string {
	parts := make([]string, len(t.verdicts))
	for i, v := range t.verdicts {
		parts[i] = fmt.Sprintf("%d× (first at evaluation %d) %s", t.counts[i], t.first[i], v)
	}
	return strings.Join(parts, "; ")
}
