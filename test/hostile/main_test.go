// Package hostile runs `shepherd serve` (in this process, with its
// production flags) against a real control plane whose apiserver calls
// shepherd's webhooks, and attacks the webhook port the way any client that
// reaches it could: connections that declare the largest body and stall,
// connections that send most of a large body and stall, more connections
// than the server accepts. Each test asserts the outcome: the Go heap stays
// bounded, over-cap clients are turned away at once, and the apiserver's
// admission requests are still answered meanwhile.
//
// The heap is measured with runtime.MemStats: serve runs in this process,
// the control plane does not.
//
// The apiserver presents a client certificate to every webhook (an
// AdmissionConfiguration whose kubeConfigFile names one, as
// docs/operations.md, "Turning the client CA on", describes), so a serve with --webhook-client-ca
// (TestForgedRequestsWithTheClientCAWriteNothing) gets its requests; the
// tests' own clients present it too, and bind their source addresses in
// 127/8 so that the per-client caps apply to them as to distinct clients.
package hostile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var (
	env *cluster.Cluster
	// serving is the shared serve, its flags serveArgs.
	serving   *cluster.Serving
	serveArgs []string
	// clientPKI is the CA of the apiserver's client certificate and the
	// certificate, also handed to the tests' own clients.
	clientPKI *pki
	webhook   string // host:port of shepherd's webhook server
	// stalled is how many connections declare the largest body and stall
	// (SHEPHERD_HOSTILE_CONNS overrides it).
	stalled = 200
	// maxConnections is serve's --webhook-max-connections here: above the
	// stalled connections, so the apiserver's own still fit.
	maxConnections int
)

func TestMain(m *testing.M) {
	// TestForgedRequestsWithTheClientCAWriteNothing runs a second serve,
	// in a child process of this binary.
	cluster.RunChildIfAsked()
	if v := os.Getenv("SHEPHERD_HOSTILE_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "SHEPHERD_HOSTILE_CONNS=%q: want a positive number\n", v)
			os.Exit(2)
		}
		stalled = n
	}
	maxConnections = stalled + 100
	dir, err := os.MkdirTemp("", "shepherd-hostile-")
	if err == nil {
		clientPKI, err = newPKI(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cluster.RunMain(m, cluster.Options{
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
		ExtraAPIServerFlags: map[string]string{"admission-control-config-file": clientPKI.admissionConfig},
	}, &env, func(*cluster.Cluster) (cluster.Teardown, error) {
		return cluster.Undo(func() error { return os.RemoveAll(dir) }), nil
	}, startServe)
}

// startServe starts the suite's serve, admission only.
func startServe(c *cluster.Cluster) (_ cluster.Teardown, err error) {
	wh := c.Env.WebhookInstallOptions
	webhook = net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	serveArgs = []string{
		"--leader-elect=false",
		// Admission only: the reconcilers would add heap of their own.
		"--disable-reconcilers",
		"--webhook-max-connections=" + strconv.Itoa(maxConnections),
	}
	if serving, err = c.Serve(serveArgs...); err != nil {
		return nil, err
	}
	return serving.Teardown, nil
}

// clientCertFor is a client-authentication certificate signed by ca, as
// PEM and as a tls.Certificate.
func clientCertFor(ca *certs.KeyPair) (certPEM, keyPEM []byte, cert tls.Certificate, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, cert, err
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, cert, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, cert, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	return certPEM, keyPEM, cert, err
}

// pki is the apiserver's client certificate for the webhooks.
type pki struct {
	ca *certs.KeyPair
	// caFile is the CA's PEM, for --webhook-client-ca.
	caFile string
	// cert is the client certificate the apiserver presents.
	cert tls.Certificate
	// admissionConfig is the apiserver's --admission-control-config-file.
	admissionConfig string
}

// newPKI writes into dir a client CA, a client certificate it signs, a
// kubeconfig whose user "*" (every webhook) holds it, and the
// AdmissionConfiguration that has both webhook admission plugins use it:
// the configuration docs/operations.md, "Turning the client CA on", gives.
func newPKI(dir string) (*pki, error) {
	ca, err := certs.GenerateCA(time.Now(), 24*time.Hour, "kube-apiserver webhook client CA")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, cert, err := clientCertFor(ca)
	if err != nil {
		return nil, err
	}
	p := &pki{ca: ca, cert: cert, caFile: filepath.Join(dir, "client-ca.crt"), admissionConfig: filepath.Join(dir, "admission.yaml")}
	kubeconfig := filepath.Join(dir, "webhook-kubeconfig.yaml")
	plugin := func(name string) string {
		return "- name: " + name + "\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: " + kubeconfig + "\n"
	}
	for name, b := range map[string][]byte{
		p.caFile:                         ca.CertPEM,
		filepath.Join(dir, "client.crt"): certPEM,
		filepath.Join(dir, "client.key"): keyPEM,
		kubeconfig: []byte("apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: " + filepath.Join(dir, "client.crt") +
			"\n    client-key: " + filepath.Join(dir, "client.key") + "\n"),
		p.admissionConfig: []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
			plugin("ValidatingAdmissionWebhook") + plugin("MutatingAdmissionWebhook")),
	} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
