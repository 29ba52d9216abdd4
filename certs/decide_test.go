package certs

import (
	"crypto/x509"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const (
	caLife      = 300 * 24 * time.Hour
	servingLife = 30 * 24 * time.Hour
	delay       = time.Minute
)

var testPolicy = Policy{
	CALifetime:              caLife,
	ServingLifetime:         servingLife,
	CARotationFraction:      2.0 / 3,
	ServingRotationFraction: 2.0 / 3,
	PropagationDelay:        delay,
	DNSNames:                testNames,
}

func certs(kps ...*KeyPair) []*x509.Certificate {
	var out []*x509.Certificate
	for _, kp := range kps {
		out = append(out, kp.Cert)
	}
	return out
}

func TestDecide(t *testing.T) {
	caA := mustCA(t, t0, caLife)
	servingA := mustServing(t, t0, servingLife, caA)
	servingDue := t0.Add(20 * 24 * time.Hour) // 2/3 of 30 days
	caDue := t0.Add(200 * 24 * time.Hour)     // 2/3 of 300 days

	// A CA rotation in progress: caB issued at t1, the serving
	// certificate still from caA.
	t1 := t0.Add(201 * 24 * time.Hour)
	caB := mustCA(t, t1, caLife)
	servingOld := mustServing(t, t1.Add(-time.Hour), servingLife, caA)
	servingB := mustServing(t, t1.Add(2*delay), servingLife, caB)

	otherCA := mustCA(t, t0, caLife)
	foreign := mustServing(t, t0, servingLife, otherCA)
	wrongNames := mustServing(t, t0, servingLife, caA, "old-service.shepherd-system.svc")
	expiredCA := mustCA(t, t0.Add(-caLife-time.Hour), caLife)

	steady := State{Signer: caA.Cert, Trusted: certs(caA), Serving: servingA.Cert, SignerInjected: true}
	withCA := func(s State, f func(*State)) State { f(&s); return s }

	tests := []struct {
		name  string
		now   time.Time
		state State
		want  Decision
	}{{
		name:  "nothing yet: new CA and serving certificate",
		now:   t0,
		state: State{},
		want:  Decision{NewCA: true, CAReason: ReasonMissing, NewServing: true, ServingReason: ReasonMissing, RequeueAt: t0.Add(20 * 24 * time.Hour)},
	}, {
		name:  "fresh and injected: nothing to do until the serving certificate falls due",
		now:   t0.Add(time.Hour),
		state: steady,
		want:  Decision{RequeueAt: servingDue},
	}, {
		name:  "one second before the serving certificate's 2/3",
		now:   servingDue.Add(-time.Second),
		state: steady,
		want:  Decision{RequeueAt: servingDue},
	}, {
		name:  "serving certificate at 2/3 of its life is rotated",
		now:   servingDue,
		state: steady,
		want:  Decision{NewServing: true, ServingReason: ReasonDue, RequeueAt: servingDue.Add(20 * 24 * time.Hour)},
	}, {
		name: "serving rotation asked for right after install: same CA, no propagation wait",
		now:  t0.Add(delay / 2),
		state: withCA(steady, func(s *State) {
			s.RotateServingRequested = true
			s.SignerInjected = false
		}),
		want: Decision{NewServing: true, ServingReason: ReasonRequested, RequeueAt: t0.Add(delay/2 + 20*24*time.Hour)},
	}, {
		name:  "expired serving certificate is replaced at once, injected or not",
		now:   t0.Add(servingLife),
		state: withCA(steady, func(s *State) { s.SignerInjected = false }),
		want:  Decision{NewServing: true, ServingReason: ReasonExpired, RequeueAt: t0.Add(servingLife + 20*24*time.Hour)},
	}, {
		name:  "operator asked for a serving rotation",
		now:   t0.Add(time.Hour),
		state: withCA(steady, func(s *State) { s.RotateServingRequested = true }),
		want:  Decision{NewServing: true, ServingReason: ReasonRequested, RequeueAt: t0.Add(time.Hour + 20*24*time.Hour)},
	}, {
		name:  "service renamed: the serving certificate is re-issued at once",
		now:   t0.Add(time.Hour),
		state: withCA(steady, func(s *State) { s.Serving = wrongNames.Cert }),
		want:  Decision{NewServing: true, ServingReason: ReasonNames, RequeueAt: t0.Add(time.Hour + 20*24*time.Hour)},
	}, {
		name:  "serving certificate from a CA the bundle does not hold",
		now:   t0.Add(time.Hour),
		state: withCA(steady, func(s *State) { s.Serving = foreign.Cert }),
		want:  Decision{NewServing: true, ServingReason: ReasonUntrusted, RequeueAt: t0.Add(time.Hour + 20*24*time.Hour)},
	}, {
		name:  "CA at 2/3 of its life: new CA now, serving certificate waits for propagation",
		now:   caDue,
		state: withCA(steady, func(s *State) { s.Serving = servingOld.Cert }),
		want:  Decision{NewCA: true, CAReason: ReasonDue, ServingReason: ReasonSignerMoved, ServingDeferred: true, RequeueAt: caDue.Add(delay)},
	}, {
		name:  "operator asked for a CA rotation",
		now:   t0.Add(time.Hour),
		state: withCA(steady, func(s *State) { s.RotateCARequested = true }),
		want:  Decision{NewCA: true, CAReason: ReasonRequested, ServingReason: ReasonSignerMoved, ServingDeferred: true, RequeueAt: t0.Add(time.Hour + delay)},
	}, {
		name: "new CA in the bundle, propagation delay not over",
		now:  t1.Add(delay / 2),
		state: State{Signer: caB.Cert, Trusted: certs(caB, caA), Serving: servingOld.Cert,
			SignerInjected: true},
		want: Decision{ServingReason: ReasonSignerMoved, ServingDeferred: true, RequeueAt: t1.Add(delay)},
	}, {
		name:  "new CA past the delay but not yet injected everywhere",
		now:   t1.Add(2 * delay),
		state: State{Signer: caB.Cert, Trusted: certs(caB, caA), Serving: servingOld.Cert},
		want:  Decision{ServingReason: ReasonSignerMoved, ServingDeferred: true, RequeueAt: t1.Add(3 * delay)},
	}, {
		name: "new CA injected and propagated: serving certificate re-issued from it",
		now:  t1.Add(delay),
		state: State{Signer: caB.Cert, Trusted: certs(caB, caA), Serving: servingOld.Cert,
			SignerInjected: true},
		want: Decision{NewServing: true, ServingReason: ReasonSignerMoved, RequeueAt: t1.Add(delay + 20*24*time.Hour)},
	}, {
		name: "rotation finished: old CA stays until it expires",
		now:  t1.Add(3 * delay),
		state: State{Signer: caB.Cert, Trusted: certs(caB, caA), Serving: servingB.Cert,
			SignerInjected: true},
		want: Decision{RequeueAt: rotateAt(IssuedAt(servingB.Cert), servingB.Cert.NotAfter, 2.0/3)},
	}, {
		name:  "expired CA: everything is replaced at once",
		now:   t0,
		state: State{Signer: expiredCA.Cert, Trusted: certs(expiredCA), Serving: foreign.Cert, SignerInjected: true},
		want:  Decision{NewCA: true, CAReason: ReasonExpired, NewServing: true, ServingReason: ReasonUntrusted, RequeueAt: t0.Add(20 * 24 * time.Hour)},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			clk.SetTime(tc.now)
			got := Decide(clk.Now(), tc.state, testPolicy)
			if got != tc.want {
				t.Errorf("Decide =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// TestDecideRotationTimeline walks a fake clock through two CA lifetimes,
// applying every decision the way the controller does, and checks that at
// every step the certificate being served is trusted by the bundle the
// apiserver holds — the property that keeps admissions from failing.
func TestDecideRotationTimeline(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	p := testPolicy
	var signer, serving *KeyPair
	var bundle []*x509.Certificate
	injected := false
	caRotations, servingRotations := 0, 0
	end := t0.Add(2 * caLife)
	for steps := 0; clk.Now().Before(end); steps++ {
		if steps > 10000 {
			t.Fatal("no progress: the decision never moves the clock forward")
		}
		now := clk.Now()
		st := State{Trusted: bundle, SignerInjected: injected}
		if signer != nil {
			st.Signer = signer.Cert
		}
		if serving != nil {
			st.Serving = serving.Cert
		}
		d := Decide(now, st, p)
		var err error
		if d.NewCA {
			old := signer
			if signer, err = GenerateCA(now, p.CALifetime, "ca"); err != nil {
				t.Fatal(err)
			}
			if old != nil {
				bundle = append(bundle, old.Cert)
				caRotations++
			}
		}
		if d.NewServing {
			if serving != nil {
				servingRotations++
			}
			if serving, err = GenerateServing(now, p.ServingLifetime, signer, p.DNSNames, nil); err != nil {
				t.Fatal(err)
			}
		}
		var servingCert *x509.Certificate
		if serving != nil {
			servingCert = serving.Cert
		}
		bundle = DesiredBundle(now, signer.Cert, bundle, servingCert)
		// The injection takes effect at once here; the apiserver trusts
		// bundle from now on.
		injected = true

		roots := x509.NewCertPool()
		for _, c := range bundle {
			roots.AddCert(c)
		}
		if _, err := serving.Cert.Verify(x509.VerifyOptions{DNSName: testNames[0], Roots: roots, CurrentTime: now}); err != nil {
			t.Fatalf("at %s the served certificate is not trusted by the injected bundle: %v", now, err)
		}
		if !d.RequeueAt.After(now) {
			t.Fatalf("at %s RequeueAt %s is not in the future", now, d.RequeueAt)
		}
		clk.SetTime(d.RequeueAt)
	}
	// 600 days: the CA rotates at day 200 and 400; the serving certificate
	// about every 20 days.
	if caRotations != 2 {
		t.Errorf("CA rotations = %d, want 2", caRotations)
	}
	if servingRotations < 28 {
		t.Errorf("serving rotations = %d, want at least 28", servingRotations)
	}
}

func TestDesiredBundle(t *testing.T) {
	now := t0.Add(time.Hour)
	cas := make([]*KeyPair, 6)
	for i := range cas {
		// Later index: issued later, expires later.
		cas[i] = mustCA(t, t0.Add(time.Duration(i)*time.Minute), caLife)
	}
	expired := mustCA(t, t0.Add(-caLife), caLife)
	serving0 := mustServing(t, t0, servingLife, cas[0])
	leaf := mustServing(t, t0, servingLife, cas[1])

	tests := []struct {
		name    string
		signer  *KeyPair
		current []*x509.Certificate
		serving *x509.Certificate
		want    []*x509.Certificate
	}{{
		name:   "empty: just the signer",
		signer: cas[0],
		want:   certs(cas[0]),
	}, {
		name:    "signer first, then the others newest first",
		signer:  cas[3],
		current: certs(cas[1], cas[2]),
		want:    certs(cas[3], cas[2], cas[1]),
	}, {
		name:    "expired CAs, duplicates and non-CAs are dropped",
		signer:  cas[1],
		current: certs(expired, cas[0], cas[1], cas[0], leaf),
		want:    certs(cas[1], cas[0]),
	}, {
		name:    "capped, newest kept",
		signer:  cas[5],
		current: certs(cas[0], cas[1], cas[2], cas[3], cas[4]),
		want:    certs(cas[5], cas[4], cas[3], cas[2]),
	}, {
		name:    "capped, the serving certificate's issuer always kept",
		signer:  cas[5],
		current: certs(cas[0], cas[1], cas[2], cas[3], cas[4]),
		serving: serving0.Cert,
		want:    certs(cas[5], cas[0], cas[4], cas[3]),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DesiredBundle(now, tc.signer.Cert, tc.current, tc.serving)
			if len(got) != len(tc.want) {
				t.Fatalf("bundle has %d CAs, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Errorf("bundle[%d] = %s (NotAfter %s), want NotAfter %s", i, got[i].Subject, got[i].NotAfter, tc.want[i].NotAfter)
				}
			}
			if !BundleContains(EncodeBundle(got), tc.signer.Cert) {
				t.Error("encoded bundle lacks the signer")
			}
		})
	}
}
