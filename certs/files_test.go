package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	v1 := map[string][]byte{CertFile: []byte("cert-1"), KeyFile: []byte("key-1")}
	changed, err := WriteFiles(dir, v1)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	for name, want := range v1 {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != string(want) {
			t.Errorf("%s = %q (err %v), want %q", name, got, err, want)
		}
		if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != filepath.Join(dataLink, name) {
			t.Errorf("%s links to %q (err %v), want it through %s", name, target, err, dataLink)
		}
	}
	if info, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (err %v), want 0600", info.Mode().Perm(), err)
	}

	if changed, err := WriteFiles(dir, v1); err != nil || changed {
		t.Errorf("rewriting the same content: changed=%v err=%v, want no change", changed, err)
	}

	v2 := map[string][]byte{CertFile: []byte("cert-2"), KeyFile: []byte("key-2"), CAFile: []byte("ca-2")}
	if changed, err := WriteFiles(dir, v2); err != nil || !changed {
		t.Fatalf("second write: changed=%v err=%v", changed, err)
	}
	for name, want := range v2 {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != string(want) {
			t.Errorf("%s = %q (err %v), want %q", name, got, err, want)
		}
	}
	// Only the current data directory is left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	dataDirs := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..data-") {
			dataDirs++
		}
	}
	if dataDirs != 1 {
		t.Errorf("%d data directories after two writes, want 1", dataDirs)
	}
}

func TestWriteFilesReplacesPlainFiles(t *testing.T) {
	// A directory that held plain files (e.g. copied in by hand) is taken
	// over.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CertFile), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFiles(dir, map[string][]byte{CertFile: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, CertFile)); string(got) != "new" {
		t.Errorf("tls.crt = %q, want new", got)
	}
}

func TestReadyChecker(t *testing.T) {
	ca := mustCA(t, t0, 48*time.Hour)
	s := mustServing(t, t0, 24*time.Hour, ca)
	clk := clocktesting.NewFakePassiveClock(t0.Add(time.Hour))

	dir := t.TempDir()
	ready := ReadyChecker(dir, clk)
	if err := ready(nil); err == nil || !strings.Contains(err.Error(), "no serving certificate yet") {
		t.Errorf("empty directory: err = %v, want 'no serving certificate yet'", err)
	}
	if _, err := WriteFiles(dir, map[string][]byte{CertFile: s.CertPEM, KeyFile: ca.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	if err := ready(nil); err == nil {
		t.Error("a key that does not match the certificate is reported ready")
	}
	if _, err := WriteFiles(dir, map[string][]byte{CertFile: s.CertPEM, KeyFile: s.KeyPEM, CAFile: ca.CertPEM}); err != nil {
		t.Fatal(err)
	}
	if err := ready(nil); err != nil {
		t.Errorf("valid pair: %v", err)
	}
	clk.SetTime(t0.Add(25 * time.Hour))
	if err := ready(nil); err == nil || !strings.Contains(err.Error(), "not now") {
		t.Errorf("expired pair: err = %v, want it reported not valid now", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := DefaultOptions()
	ok.Namespace = "shepherd-system"
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cm := Options{Mode: ModeCertManager, CertDir: "/certs"}
	if err := cm.Validate(); err != nil {
		t.Errorf("cert-manager mode needs only a directory: %v", err)
	}
	tests := map[string]struct {
		mutate func(*Options)
		flag   string
	}{
		"unknown mode":            {func(o *Options) { o.Mode = "vault" }, "--cert-mode"},
		"no directory":            {func(o *Options) { o.CertDir = "" }, "--cert-dir"},
		"no secret":               {func(o *Options) { o.SecretName = "" }, "--cert-secret"},
		"no webhook config":       {func(o *Options) { o.MutatingWebhookName, o.ValidatingWebhookName = "", "" }, "--mutating-webhook-configuration"},
		"negative lifetime":       {func(o *Options) { o.ServingLifetime = -time.Hour }, "--cert-serving-lifetime"},
		"fraction of one":         {func(o *Options) { o.CARotationFraction = 1 }, "--cert-ca-rotation-fraction"},
		"fraction of zero":        {func(o *Options) { o.ServingRotationFraction = -0.5 }, "--cert-serving-rotation-fraction"},
		"delay longer than slack": {func(o *Options) { o.CALifetime = time.Hour; o.CAPropagationDelay = time.Hour }, "--cert-ca-propagation-delay"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := ok
			tc.mutate(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
}

func TestAddFlags(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--cert-mode=cert-manager", "--cert-dir=/certs", "--cert-serving-lifetime=24h", "--cert-extra-sans=127.0.0.1,shepherd.local"}); err != nil {
		t.Fatal(err)
	}
	if o.Mode != ModeCertManager || o.CertDir != "/certs" || o.ServingLifetime != 24*time.Hour || len(o.ExtraSANs) != 2 {
		t.Errorf("parsed options %+v", o)
	}
	if o.CALifetime != DefaultCALifetime || o.SecretName != DefaultSecretName {
		t.Errorf("unset flags did not keep their defaults: %+v", o)
	}
	p := o.policy()
	if len(p.IPs) != 1 || p.DNSNames[len(p.DNSNames)-1] != "shepherd.local" {
		t.Errorf("extra SANs: IPs %v, DNS names %v", p.IPs, p.DNSNames)
	}

	// The webhook server may own --cert-dir; AddFlags then leaves it alone
	// instead of panicking on a duplicate flag.
	var dir string
	fs2 := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs2.StringVar(&dir, "cert-dir", "", "")
	var o2 Options
	o2.AddFlags(fs2)
	if err := fs2.Parse([]string{"--cert-dir=/x", "--cert-mode=self-signed"}); err != nil {
		t.Fatal(err)
	}
	if dir != "/x" {
		t.Errorf("the caller's --cert-dir = %q, want /x", dir)
	}
}
