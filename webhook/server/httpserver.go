package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Defaults of the webhook server (`shepherd serve`'s flags).
const (
	// DefaultReadTimeout bounds reading one request — its headers and its
	// body — and a new connection's TLS handshake. The apiserver's webhook
	// timeout is 10 s by default (shepherd's configurations set 5 s), so a
	// request still arriving after this long has no one waiting for it.
	DefaultReadTimeout = 10 * time.Second
	// DefaultMaxConnections bounds the open connections. The apiservers
	// keep a few each; a thousand is ample, and each costs some tens of
	// KiB (TLS and HTTP buffers) whatever it sends.
	DefaultMaxConnections = 1024
)

// DefaultMaxConnectionsPerClient is the per-source-address cap when none
// is set: a quarter of maxConnections, at least 16 (and never above
// maxConnections). The apiservers each keep a few connections, far below
// it; a client holding a quarter leaves three quarters to the others.
func DefaultMaxConnectionsPerClient(maxConnections int) int {
	return min(max(maxConnections/4, 16), maxConnections)
}

const (
	// idleTimeout closes a kept-alive connection no request has used for
	// this long. It outlasts the idle timeout of Go's HTTP clients (90 s,
	// the apiserver's webhook client included), so the client always
	// closes an idle connection first: with equal timeouts the two timers
	// race, and a client that reuses the connection as the server closes
	// it fails that admission ("write: broken pipe"; a POST is not
	// retried), as test/faults saw once in 5,188 admissions.
	idleTimeout = 120 * time.Second
	// maxHeaderBytes bounds a request's headers. The apiserver sends a few
	// hundred bytes; net/http's default of 1 MiB would let each of the
	// connections allowed hold a megabyte in headers alone.
	maxHeaderBytes = 64 << 10
	// defaultShutdownTimeout bounds how long stopping waits for the
	// requests in flight, as controller-runtime's webhook server does.
	defaultShutdownTimeout = time.Minute
)

// ServingOptions configures a WebhookServer.
type ServingOptions struct {
	// Host and Port are the address served; Host empty: every address.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key, watched and reloaded when they
	// change, unless a TLSOpts function sets GetCertificate.
	CertDir string
	// TLSOpts adjust the TLS configuration (see TLSOptions).
	TLSOpts []func(*tls.Config)
	// ClientCAFile, when set, is a PEM bundle of the CAs whose client
	// certificates are required: a request from a client presenting none
	// (only the apiserver has one, configured through its
	// AdmissionConfiguration) is answered 401 before its body is read, and
	// a certificate of another CA fails the TLS handshake. Read once at
	// start.
	ClientCAFile string
	// ReadTimeout bounds reading each request, headers and body, and a
	// connection's TLS handshake (DefaultReadTimeout if zero).
	ReadTimeout time.Duration
	// MaxConnections bounds the connections open at once; more are closed
	// as soon as they are accepted (DefaultMaxConnections if zero).
	MaxConnections int
	// MaxConnectionsPerClient bounds the connections open at once from one
	// source address, so that one client cannot take every connection
	// (DefaultMaxConnectionsPerClient of MaxConnections if zero; at most
	// MaxConnections).
	MaxConnectionsPerClient int
	// ShutdownTimeout bounds how long Start waits, once its context ends,
	// for the requests in flight (one minute if zero). Shutdown, called
	// before the context ends, takes its bound from its own context.
	ShutdownTimeout time.Duration
	// Log receives the server's own errors (failed TLS handshakes, ...)
	// at verbosity 1: a hostile client must not flood the log.
	Log logr.Logger
}

// WebhookServer serves the admission webhooks over TLS. It implements
// controller-runtime's webhook.Server (pass it as the manager's
// WebhookServer) and differs from controller-runtime's own in what it
// bounds: the time to read a request, headers and body, the connections
// open at once and the size of headers — a client that can reach the port
// must not be able to exhaust the replica's memory or hold it up. The
// handlers bound the rest (Limits).
//
// It also stops in two steps, for a rollout that fails no admission: Drain
// keeps answering but closes each connection after its response (a
// terminating replica is still sent requests until its endpoint is gone
// everywhere, over new connections and over those its clients keep alive),
// then Shutdown stops accepting and waits for the requests in flight.
type WebhookServer struct {
	opts ServingOptions
	mux  *http.ServeMux

	mu    sync.Mutex
	paths map[string]bool

	started        atomic.Bool
	serving        atomic.Bool
	draining       atomic.Bool
	getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)

	// life guards srv and stopping: Shutdown may come before, during or
	// after Start.
	life     sync.Mutex
	srv      *http.Server
	stopping bool
	// down is closed once the first Shutdown has returned: the requests in
	// flight are answered (or were cut off at its bound).
	down     chan struct{}
	downOnce sync.Once
}

var _ crwebhook.Server = (*WebhookServer)(nil)

// NewWebhookServer returns a server of opts; Start runs it.
func NewWebhookServer(opts ServingOptions) *WebhookServer {
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	if opts.MaxConnectionsPerClient <= 0 {
		opts.MaxConnectionsPerClient = DefaultMaxConnectionsPerClient(opts.MaxConnections)
	}
	opts.MaxConnectionsPerClient = min(opts.MaxConnectionsPerClient, opts.MaxConnections)
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = defaultShutdownTimeout
	}
	if opts.Port == 0 {
		opts.Port = crwebhook.DefaultPort
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &WebhookServer{opts: opts, mux: http.NewServeMux(), paths: map[string]bool{}, down: make(chan struct{})}
}

// NeedLeaderElection is false: every replica answers admission requests.
func (*WebhookServer) NeedLeaderElection() bool { return false }

// Register serves hook at path; it panics if path is taken, as
// controller-runtime's server does.
func (s *WebhookServer) Register(path string, hook http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paths[path] {
		panic(fmt.Errorf("webhook path %s is registered twice", path))
	}
	s.paths[path] = true
	s.mux.Handle(path, hook)
}

// WebhookMux returns the multiplexer the hooks are registered on.
func (s *WebhookServer) WebhookMux() *http.ServeMux { return s.mux }

// Addr is the address served.
func (s *WebhookServer) Addr() string {
	return net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// tlsConfig is the TLS configuration served: TLSOpts applied over
// controller-runtime's defaults, the certificate from CertDir unless
// TLSOpts provides one, and client certificates verified if ClientCAFile
// is set.
func (s *WebhookServer) tlsConfig(ctx context.Context) (*tls.Config, error) {
	cfg := &tls.Config{NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	for _, op := range s.opts.TLSOpts {
		op(cfg)
	}
	if cfg.GetCertificate == nil {
		w, err := certwatcher.New(filepath.Join(s.opts.CertDir, "tls.crt"), filepath.Join(s.opts.CertDir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("loading the webhook serving certificate from %s: %w", s.opts.CertDir, err)
		}
		cfg.GetCertificate = w.GetCertificate
		go func() {
			if err := w.Start(ctx); err != nil {
				s.opts.Log.Error(err, "watching the webhook serving certificate")
			}
		}()
	}
	if s.opts.ClientCAFile != "" {
		pem, err := os.ReadFile(s.opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the webhook client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the webhook client CA %s holds no PEM certificate", s.opts.ClientCAFile)
		}
		cfg.ClientCAs = pool
		// Verified if given, required by serveHTTP: a client without one
		// gets a 401 that says what is missing instead of a bare
		// handshake failure (which the apiserver logs as a TLS error),
		// and a certificate of another CA still fails the handshake.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// httpServer is the http.Server of the hooks, with the server's bounds.
func (s *WebhookServer) httpServer(ctx context.Context) *http.Server {
	return &http.Server{
		Handler:     http.HandlerFunc(s.serveHTTP),
		BaseContext: func(net.Listener) context.Context { return ctx },
		// ReadTimeout is the deadline of a request's headers and body
		// (and of the TLS handshake): a client that stalls is cut off
		// and its handler answered 408. ReadHeaderTimeout is the same
		// bound, spelled out.
		ReadTimeout:       s.opts.ReadTimeout,
		ReadHeaderTimeout: s.opts.ReadTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(logWriter{s.opts.Log}, "", 0),
	}
}

// serveHTTP is the mux, with "Connection: close" on every response once
// Drain was called: net/http then closes the connection after the
// response, and the client, told so, opens its next one elsewhere.
// Closing idle connections instead could cut one a client has just picked
// for its next request, which fails an admission (a POST is not retried).
//
// With ClientCAFile set, a request without a verified client certificate
// is answered 401 before the mux, its body unread: no handler runs, so it
// writes no Event and no audit record.
func (s *WebhookServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	if s.opts.ClientCAFile != "" && !CallerAuthenticated(r) {
		unauthenticatedRequests.Inc()
		// The body is not read: close rather than drain it.
		w.Header().Set("Connection", "close")
		http.Error(w, errUnauthenticated, http.StatusUnauthorized)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// errUnauthenticated is the answer to a request without a client
// certificate when one is required.
const errUnauthenticated = "shepherd's webhook server requires a client certificate signed by the CA of --webhook-client-ca, " +
	"and this request presented none: give the kube-apiserver that certificate (the kubeConfigFile of its AdmissionConfiguration; see README, Security)"

// CallerAuthenticated says whether r came over TLS with a client
// certificate the server verified against its client CA. Without
// ClientCAFile no certificate is asked for, so it is false.
func CallerAuthenticated(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}

// Start serves until ctx ends or Shutdown is called, then stops accepting
// and waits for the requests in flight (at most ShutdownTimeout when ctx
// ended; Shutdown's own bound otherwise).
func (s *WebhookServer) Start(ctx context.Context) error {
	cfg, err := s.tlsConfig(ctx)
	if err != nil {
		return err
	}
	s.getCertificate = cfg.GetCertificate
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		return fmt.Errorf("listening for admission requests: %w", err)
	}
	srv := s.httpServer(ctx)
	s.life.Lock()
	if s.stopping {
		s.life.Unlock()
		_ = l.Close()
		return nil
	}
	s.srv = srv
	s.life.Unlock()
	served := make(chan struct{})
	defer close(served)
	go func() {
		select {
		case <-ctx.Done():
		case <-served:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
		defer cancel()
		if err := s.Shutdown(sctx); err != nil {
			s.opts.Log.Error(err, "stopping the webhook server")
		}
	}()
	s.opts.Log.Info("serving admission webhooks", "address", s.Addr(), "readTimeout", s.opts.ReadTimeout,
		"maxConnections", s.opts.MaxConnections, "maxConnectionsPerClient", s.opts.MaxConnectionsPerClient,
		"clientCertificates", s.opts.ClientCAFile != "")
	s.serving.Store(true)
	s.started.Store(true)
	err = srv.Serve(tls.NewListener(newLimitListener(l, s.opts.MaxConnections, s.opts.MaxConnectionsPerClient), cfg))
	s.serving.Store(false)
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving admission webhooks: %w", err)
	}
	// Serve returns as soon as Shutdown closes the listener; the requests
	// in flight are answered after that.
	<-s.down
	return nil
}

// Drain keeps the server answering, on the connections open and on new
// ones, but closes each connection after its next response. Call it when
// the replica starts to leave the Service (its readiness failing), some
// time before Shutdown: clients then reconnect, to another replica once
// the endpoint is gone, and by Shutdown few idle connections remain to be
// closed under a client.
func (s *WebhookServer) Drain() { s.draining.Store(true) }

// Shutdown stops the server: it stops accepting, closes the idle
// connections and waits for the requests in flight until ctx ends, then
// closes what is left; Start then returns. It may be called before Start
// (Start then serves nothing) and more than once.
func (s *WebhookServer) Shutdown(ctx context.Context) error {
	s.life.Lock()
	srv := s.srv
	s.stopping = true
	s.life.Unlock()
	s.serving.Store(false)
	if srv == nil {
		s.downOnce.Do(func() { close(s.down) })
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		// Out of time: cut the requests still running; the apiserver's
		// failurePolicy decides for them.
		_ = srv.Close()
		err = fmt.Errorf("requests still in flight when the shutdown bound passed were cut off: %w", err)
	}
	s.downOnce.Do(func() { close(s.down) })
	return err
}

// StartedChecker is ready once the server accepts connections and has a
// serving certificate. Unlike controller-runtime's it does not dial the
// server: under load every connection may be taken, and a readiness probe
// failing then would take a replica out of the Service exactly when the
// others need it most; with client certificates required, a dial without
// one would not prove anything either.
func (s *WebhookServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.started.Load() {
			return errors.New("webhook server has not been started yet")
		}
		if !s.serving.Load() {
			return errors.New("webhook server has stopped serving")
		}
		if _, err := s.getCertificate(&tls.ClientHelloInfo{}); err != nil {
			return fmt.Errorf("webhook server has no serving certificate: %w", err)
		}
		return nil
	}
}

// logWriter hands net/http's error log to a logr.Logger at verbosity 1.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
