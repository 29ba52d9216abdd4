package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// dataLink is the symlink the files point through; swapping it replaces
// every file at once, the way the kubelet updates Secret volumes.
const dataLink = "..data"

// WriteFiles writes files (name → content) into dir atomically: all of them
// change together or none does. Each file is a symlink through dir/..data to
// a fresh timestamped directory, and ..data is replaced with one rename. It
// reports whether anything changed.
func WriteFiles(dir string, files map[string][]byte) (bool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("creating certificate directory %s: %w", dir, err)
	}
	same := true
	for name, content := range files {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, content) {
			same = false
			break
		}
	}
	if same {
		return false, nil
	}
	oldData, _ := os.Readlink(filepath.Join(dir, dataLink))

	data, err := os.MkdirTemp(dir, "..data-")
	if err != nil {
		return false, fmt.Errorf("creating a data directory in %s: %w", dir, err)
	}
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(data, name), content, mode); err != nil {
			return false, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	if err := os.Chmod(data, 0o755); err != nil {
		return false, fmt.Errorf("opening %s for reading: %w", data, err)
	}
	if err := swapSymlink(dir, dataLink, filepath.Base(data)); err != nil {
		return false, err
	}
	for name := range files {
		target := filepath.Join(dataLink, name)
		if cur, err := os.Readlink(filepath.Join(dir, name)); err == nil && cur == target {
			continue
		}
		if err := swapSymlink(dir, name, target); err != nil {
			return false, err
		}
	}
	if oldData != "" && oldData != filepath.Base(data) && strings.HasPrefix(oldData, "..data-") {
		// Removing the old files also wakes watchers that followed the old
		// symlink targets.
		if err := os.RemoveAll(filepath.Join(dir, oldData)); err != nil {
			return true, fmt.Errorf("removing the previous certificates %s: %w", oldData, err)
		}
	}
	return true, nil
}

// swapSymlink points dir/name at target by renaming a new symlink over it.
func swapSymlink(dir, name, target string) error {
	tmp := filepath.Join(dir, ".."+name+".tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("creating a symlink for %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("replacing %s: %w", name, err)
	}
	return nil
}

// fileWriter runs on every replica: it copies the Secret's serving pair
// into the certificate directory whenever the Secret changes.
type fileWriter struct {
	reader client.Reader
	key    client.ObjectKey
	dir    string
}

func (f *fileWriter) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	s := &corev1.Secret{}
	if err := f.reader.Get(ctx, f.key, s); err != nil {
		if apierrors.IsNotFound(err) {
			// The leader creates it; its creation is the next event.
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading Secret %s: %w", f.key, err)
	}
	return reconcile.Result{}, f.write(ctx, s)
}

func (f *fileWriter) write(ctx context.Context, s *corev1.Secret) error {
	files := servingFiles(s)
	if files == nil {
		// Keep serving what is on disk; the leader repairs the Secret.
		ctrl.LoggerFrom(ctx).Info("Certificate Secret holds no valid serving pair yet; keeping the current files", "secret", f.key)
		return nil
	}
	changed, err := WriteFiles(f.dir, files)
	if err != nil {
		return err
	}
	if changed {
		ctrl.LoggerFrom(ctx).Info("Wrote the serving certificate", "dir", f.dir, "secret", f.key, "resourceVersion", s.ResourceVersion)
	}
	return nil
}

var expiryGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "shepherd_certificate_expiration_timestamp_seconds",
	Help: "When the certificate the webhook server serves (certificate=serving) and the CAs of its bundle (certificate=ca, the soonest) expire, as a Unix time.",
}, []string{"certificate"})

func init() { metrics.Registry.MustRegister(expiryGauge) }

// ReadyChecker is the /readyz check: ready only when the certificate
// directory holds a serving pair that loads and is valid now.
func ReadyChecker(dir string, clk clock.PassiveClock) healthz.Checker {
	return func(*http.Request) error {
		leaf, err := loadServing(dir)
		if err != nil {
			return err
		}
		now := clk.Now()
		expiryGauge.WithLabelValues("serving").Set(float64(leaf.NotAfter.Unix()))
		if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
			return fmt.Errorf("serving certificate in %s is valid from %s to %s, not now", dir, leaf.NotBefore, leaf.NotAfter)
		}
		if b, err := os.ReadFile(filepath.Join(dir, CAFile)); err == nil {
			if cas, err := ParseCertificates(b); err == nil && len(cas) > 0 {
				soonest := slices.MinFunc(cas, func(a, b *x509.Certificate) int { return a.NotAfter.Compare(b.NotAfter) })
				expiryGauge.WithLabelValues("ca").Set(float64(soonest.NotAfter.Unix()))
				observeIssuerExpiry(leaf, cas)
			}
		}
		return nil
	}
}

func loadServing(dir string) (*x509.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no serving certificate yet: %w", err)
		}
		return nil, fmt.Errorf("loading the serving certificate from %s: %w", dir, err)
	}
	if pair.Leaf != nil {
		return pair.Leaf, nil
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", certPath, err)
	}
	return leaf, nil
}
