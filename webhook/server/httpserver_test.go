package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/tools/events"

	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// generous bounds what should take milliseconds, on a small shared machine.
const generous = 10 * time.Second

// testServer is a WebhookServer serving a validating Handler on a local
// port with a certificate of its own CA.
type testServer struct {
	*WebhookServer
	addr string
	ca   *certs.KeyPair
	done chan error
}

func startServer(t *testing.T, opts ServingOptions, limits *Limits) *testServer {
	t.Helper()
	return startServerWith(t, opts, &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: &webhook.Verdict{Allowed: true}}, Limits: limits, Log: logr.Discard()})
}

// startServerWith is startServer with h at ValidatePath.
func startServerWith(t *testing.T, opts ServingOptions, h *Handler) *testServer {
	t.Helper()
	ca, err := certs.GenerateCA(time.Now(), time.Hour, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := certs.GenerateServing(time.Now(), time.Hour, ca, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	opts.Host, opts.Port, opts.CertDir = "127.0.0.1", port, dir
	opts.TLSOpts = TLSOptions(false)
	s := &testServer{WebhookServer: NewWebhookServer(opts), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), ca: ca, done: make(chan error, 1)}
	s.Register(ValidatePath, h)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-s.done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	ready := s.StartedChecker()
	if err := testkit.Poll(10*time.Millisecond, generous, func() error { return ready(nil) }); err != nil {
		t.Fatalf("not ready: %v", err)
	}
	return s
}

func (s *testServer) tlsConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}

func (s *testServer) dial(t *testing.T) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", s.addr, s.tlsConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *testServer) client(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: generous}
}

// post sends a valid AdmissionReview and returns the HTTP status.
func (s *testServer) post(t *testing.T, c *http.Client) (int, error) {
	t.Helper()
	resp, err := c.Post("https://"+s.addr+ValidatePath, "application/json", strings.NewReader(string(review(t, admissionv1.Create, false))))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// A client that stops sending mid-body is answered 408 once the read
// timeout passes; one that stops mid-headers is disconnected.
func TestStalledClientsAreCutOffAtTheReadTimeout(t *testing.T) {
	const readTimeout = 500 * time.Millisecond
	s := startServer(t, ServingOptions{ReadTimeout: readTimeout}, nil)

	t.Run("mid-body", func(t *testing.T) {
		c := s.dial(t)
		start := time.Now()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"apiVersion\":", ValidatePath, DefaultMaxBodyBytes)
		_ = c.SetReadDeadline(time.Now().Add(generous))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("HTTP %d, want 408", resp.StatusCode)
		}
		if took < readTimeout-50*time.Millisecond {
			t.Errorf("answered after %v, before the read timeout of %v", took, readTimeout)
		}
		t.Logf("stalled body answered 408 after %v (read timeout %v)", took, readTimeout)
	})
	t.Run("mid-headers", func(t *testing.T) {
		c := s.dial(t)
		start := time.Now()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\n", ValidatePath)
		_ = c.SetReadDeadline(time.Now().Add(generous))
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("connection not closed by the server: %v", err)
		}
		t.Logf("stalled headers disconnected after %v", time.Since(start))
	})
	t.Run("before the TLS handshake", func(t *testing.T) {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(generous))
		if _, err := io.ReadAll(c); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("connection not closed by the server: %v", err)
		}
	})
}

// Over the connection cap a connection is closed as soon as it is
// accepted, while those open are served; once one closes, a new one is
// accepted again.
func TestConnectionsOverTheCapAreClosedAtOnce(t *testing.T) {
	const maxConns = 3
	s := startServer(t, ServingOptions{MaxConnections: maxConns}, nil)
	var open []*tls.Conn
	for range maxConns {
		open = append(open, s.dial(t))
	}
	start := time.Now()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: generous}, "tcp", s.addr, s.tlsConfig())
	if err == nil {
		c.Close()
		t.Fatal("a TLS handshake over the connection cap succeeded")
	}
	t.Logf("connection over the cap of %d refused in %v: %v", maxConns, time.Since(start), err)

	// The open ones are served.
	fmt.Fprintf(open[0], "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		ValidatePath, len(review(t, admissionv1.Create, false)), review(t, admissionv1.Create, false))
	resp, err := http.ReadResponse(bufio.NewReader(open[0]), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection within the cap: %v %v", resp, err)
	}
	resp.Body.Close()

	open[1].Close()
	if err := testkit.Poll(20*time.Millisecond, generous, func() error {
		code, err := s.post(t, s.client(s.tlsConfig()))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", code)
		}
		return err
	}); err != nil {
		t.Fatalf("no connection accepted after one closed: %v", err)
	}
}

// TLS 1.2 at least, HTTP/1.1 only, and with --webhook-client-ca a client
// certificate of that CA: none is a 401, another CA's fails the handshake.
func TestTLSPolicyAndClientCertificates(t *testing.T) {
	s := startServer(t, ServingOptions{}, nil)
	old := s.tlsConfig()
	old.MaxVersion = tls.VersionTLS11
	if _, err := s.post(t, s.client(old)); err == nil {
		t.Error("a TLS 1.1 handshake succeeded")
	}
	h2 := s.tlsConfig()
	h2.NextProtos = []string{"h2", "http/1.1"}
	c, err := tls.Dial("tcp", s.addr, h2)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Error("HTTP/2 was negotiated")
	}
	c.Close()

	clientCA, err := certs.GenerateCA(time.Now(), time.Hour, "apiserver client CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	mtls := startServer(t, ServingOptions{ClientCAFile: caFile}, nil)
	if code, err := mtls.post(t, mtls.client(mtls.tlsConfig())); err != nil || code != http.StatusUnauthorized {
		t.Errorf("without a client certificate: HTTP %d %v, want 401", code, err)
	}
	other, err := certs.GenerateCA(time.Now(), time.Hour, "another CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ca   *certs.KeyPair
		ok   bool
	}{{"of the client CA", clientCA, true}, {"of another CA", other, false}} {
		cfg := mtls.tlsConfig()
		cert := clientCert(t, tc.ca)
		// Sent whatever CAs the server names: crypto/tls would otherwise
		// keep back a certificate of another CA, and get a 401.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		code, err := mtls.post(t, mtls.client(cfg))
		if tc.ok && (err != nil || code != http.StatusOK) {
			t.Errorf("client certificate %s: HTTP %d %v, want 200", tc.name, code, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("client certificate %s: HTTP %d, want the handshake refused", tc.name, code)
		}
	}
	// Readiness does not depend on dialing: it holds with client
	// certificates required.
	if err := mtls.StartedChecker()(nil); err != nil {
		t.Errorf("StartedChecker: %v", err)
	}
}

// With --webhook-client-ca, a request without a client certificate is
// answered 401, naming the flag, before its body is read: the chain never
// runs, and it writes no audit record and no Event. One with a certificate
// of the CA is admitted and its records say the caller was authenticated;
// without the flag no certificate is asked for and they say it was not.
func TestClientCAModeRefusesRequestsWithoutACertificate(t *testing.T) {
	clientCA, err := certs.GenerateCA(time.Now(), time.Hour, "apiserver client CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	deny := &webhook.Verdict{Violations: []webhook.Violation{{Rule: "V-PCS-1", Message: "m", Action: webhook.ActionDeny}}}
	type result struct {
		code          int
		admitted      bool
		records       int
		authenticated []bool
		events        int
		unauthNote    bool
	}
	for _, tc := range []struct {
		name   string
		caFile string
		cert   bool
		want   result
	}{
		{"client CA set, no certificate", caFile, false, result{code: http.StatusUnauthorized}},
		{"client CA set, certificate of the CA", caFile, true,
			result{code: http.StatusOK, admitted: true, records: 1, authenticated: []bool{true}, events: 1}},
		{"no client CA", "", false,
			result{code: http.StatusOK, admitted: true, records: 1, authenticated: []bool{false}, events: 1, unauthNote: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAdmitter{val: deny}
			ev := events.NewFakeRecorder(10)
			rec := audit.NewRecorder(16, ev, nil)
			s := startServerWith(t, ServingOptions{ClientCAFile: tc.caFile},
				&Handler{Mode: Validating, Admitter: f, Audit: rec, Log: logr.Discard()})
			cfg := s.tlsConfig()
			if tc.cert {
				cfg.Certificates = []tls.Certificate{clientCert(t, clientCA)}
			}
			unauth := testutil.ToFloat64(unauthenticatedRequests)
			resp, err := s.client(cfg).Post("https://"+s.addr+ValidatePath, "application/json", bytes.NewReader(review(t, admissionv1.Create, false)))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got result
			got.code = resp.StatusCode
			got.admitted = f.got != nil
			for _, r := range rec.Ring.Query(audit.Query{}) {
				got.records++
				got.authenticated = append(got.authenticated, r.CallerAuthenticated)
			}
			got.events = len(ev.Events)
			if got.events > 0 {
				got.unauthNote = strings.Contains(<-ev.Events, "(caller not authenticated)")
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(result{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.want.code == http.StatusUnauthorized {
				if !strings.Contains(string(body), "--webhook-client-ca") {
					t.Errorf("401 body %q does not name --webhook-client-ca", body)
				}
				if d := testutil.ToFloat64(unauthenticatedRequests) - unauth; d != 1 {
					t.Errorf("shepherd_webhook_unauthenticated_requests_total moved by %v, want 1", d)
				}
			}
		})
	}
}

// A 401 comes before the body is read: a client declaring the largest
// body and sending none of it is answered at once, holding no bytes.
func TestClientCAModeAnswersBeforeTheBody(t *testing.T) {
	clientCA, err := certs.GenerateCA(time.Now(), time.Hour, "apiserver client CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	limits := NewLimits(0, 0, 0)
	s := startServer(t, ServingOptions{ClientCAFile: caFile, ReadTimeout: generous}, limits)
	c := s.dial(t)
	start := time.Now()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", ValidatePath, DefaultMaxBodyBytes)
	_ = c.SetReadDeadline(time.Now().Add(generous))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || time.Since(start) > generous/2 {
		t.Errorf("HTTP %d after %v, want 401 at once", resp.StatusCode, time.Since(start))
	}
	if b := limits.buffered.Load(); b != 0 {
		t.Errorf("%d body bytes buffered for an unauthenticated request", b)
	}
}

// Over the cap per source address a connection from that address is
// closed at once, while other addresses are still accepted; an address
// leaves the listener's map when its last connection closes.
func TestConnectionsOverTheCapPerClientAreClosedAtOnce(t *testing.T) {
	const maxConns, perClient = 8, 2
	s := startServer(t, ServingOptions{MaxConnections: maxConns, MaxConnectionsPerClient: perClient}, nil)
	dialFrom := func(src string) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: generous, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return tls.DialWithDialer(d, "tcp", s.addr, s.tlsConfig())
	}
	refused := testutil.ToFloat64(rejectedConnections.WithLabelValues(rejectedMaxConnectionsPerClient))
	var held []*tls.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range perClient {
		c, err := dialFrom("127.0.0.2")
		if err != nil {
			t.Fatalf("a connection within the per-client cap: %v", err)
		}
		held = append(held, c)
	}
	start := time.Now()
	if c, err := dialFrom("127.0.0.2"); err == nil {
		c.Close()
		t.Fatal("a TLS handshake over the per-client cap succeeded")
	}
	t.Logf("connection over the per-client cap of %d refused in %v", perClient, time.Since(start))
	if d := testutil.ToFloat64(rejectedConnections.WithLabelValues(rejectedMaxConnectionsPerClient)) - refused; d != 1 {
		t.Errorf("rejected connections (max_connections_per_client) moved by %v, want 1", d)
	}
	// Another client is served.
	if code, err := s.post(t, s.client(s.tlsConfig())); err != nil || code != http.StatusOK {
		t.Errorf("another client beside the capped one: HTTP %d %v", code, err)
	}
	// A slot given back is taken again.
	held[0].Close()
	if err := testkit.Poll(20*time.Millisecond, generous, func() (err error) {
		held[0], err = dialFrom("127.0.0.2")
		return err
	}); err != nil {
		t.Fatalf("no connection from the capped client accepted after one closed: %v", err)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
}

func TestLimitListenerForgetsClientsWithoutConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := newLimitListener(l, 8, 2)
	defer ll.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.3"} {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var server []net.Conn
	for range clients {
		server = append(server, <-accepted)
	}
	if n := ll.clients(); n != 2 {
		t.Errorf("%d source addresses tracked, want 2", n)
	}
	for i, c := range server {
		c.Close()
		c.Close() // net/http may close twice: counted once
		clients[i].Close()
	}
	if n, open := ll.clients(), ll.open.Load(); n != 0 || open != 0 {
		t.Errorf("after every connection closed: %d source addresses tracked, %d open; want 0 and 0", n, open)
	}
}

func TestDefaultMaxConnectionsPerClient(t *testing.T) {
	for _, tc := range []struct{ max, want int }{
		{1024, 256}, {300, 75}, {64, 16}, {20, 16}, {3, 3},
	} {
		if got := DefaultMaxConnectionsPerClient(tc.max); got != tc.want {
			t.Errorf("DefaultMaxConnectionsPerClient(%d) = %d, want %d", tc.max, got, tc.want)
		}
	}
}

// clientCert is a client-authentication certificate signed by ca.
func clientCert(t *testing.T, ca *certs.KeyPair) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Once draining, the server still answers, on a kept-alive connection too,
// but tells the client to close it after the response, and closes it.
func TestDrainClosesEachConnectionAfterItsResponse(t *testing.T) {
	s := startServer(t, ServingOptions{}, nil)
	c := s.dial(t)
	br := bufio.NewReader(c)
	body := review(t, admissionv1.Create, false)
	send := func() *http.Response {
		t.Helper()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", ValidatePath, len(body), body)
		_ = c.SetReadDeadline(time.Now().Add(generous))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := send(); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before Drain: HTTP %d, Connection: close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	s.Drain()
	// The same connection, opened before Drain, is answered once more.
	if resp := send(); resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("draining: HTTP %d, Connection: close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the response the server did not close the connection: %v", err)
	}
	if err := s.StartedChecker()(nil); err != nil {
		t.Errorf("draining, the server reports itself stopped: %v", err)
	}
}

// Shutdown stops accepting at once, answers the request in flight, and
// Start returns.
func TestShutdownAnswersTheRequestsInFlight(t *testing.T) {
	s := startServer(t, ServingOptions{}, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	s.Register("/slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusOK)
	}))
	hc := s.client(s.tlsConfig())
	answered := make(chan error, 1)
	go func() {
		resp, err := hc.Get("https://" + s.addr + "/slow")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		stopped <- s.Shutdown(ctx)
	}()
	// New connections are refused while the request runs.
	if err := testkit.Poll(10*time.Millisecond, generous, func() bool {
		c, err := net.DialTimeout("tcp", s.addr, generous)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}); err != nil {
		t.Fatalf("still accepting connections after Shutdown: %v", err)
	}
	if err := s.StartedChecker()(nil); err == nil {
		t.Error("readiness still passes after Shutdown")
	}
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if err := <-answered; err != nil {
		t.Errorf("the request in flight at Shutdown was not answered: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(generous):
		t.Error("Start did not return after Shutdown")
	}
}

// A request still running when Shutdown's bound passes is cut off, and
// Shutdown says so.
func TestShutdownIsBounded(t *testing.T) {
	s := startServer(t, ServingOptions{}, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	s.Register("/stuck", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	}))
	answered := make(chan error, 1)
	go func() {
		resp, err := s.client(s.tlsConfig()).Get("https://" + s.addr + "/stuck")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	<-entered
	const bound = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err == nil {
		t.Error("Shutdown reported success with a request still running")
	}
	if took := time.Since(start); took > generous {
		t.Errorf("Shutdown took %v with a bound of %v", took, bound)
	}
	if err := <-answered; err == nil {
		t.Error("the request running past the bound was answered instead of cut off")
	}
}
