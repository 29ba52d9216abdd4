package faults

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// proxyPoll is how often the proxy asks each replica's /readyz: the delay
// with which a replica leaves (or joins) the rotation, as a Service's
// endpoints follow its pods.
const proxyPoll = 250 * time.Millisecond

// proxy stands in for shepherd's Service: it listens where the webhook
// configurations send the apiserver and forwards each connection, TLS
// untouched (every replica serves envtest's certificate), to the next
// ready replica in turn. A connection stays with its replica until either
// side closes it, as with kube-proxy.
type proxy struct {
	ln net.Listener

	mu       sync.Mutex
	backends []*backend
	next     int
	conns    map[net.Conn]struct{}

	// noBackend counts connections closed for want of a ready replica,
	// dialFailed those whose replica refused the connection.
	noBackend, dialFailed atomic.Int64
	wg                    sync.WaitGroup
}

// backend is one replica behind the proxy.
type backend struct {
	r      *cluster.Replica
	ready  atomic.Bool
	routed atomic.Int64 // connections sent to it
	stop   chan struct{}
}

func startProxy(t *testing.T) *proxy {
	t.Helper()
	wh := env.Env.WebhookInstallOptions
	ln, err := net.Listen("tcp", net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort)))
	if err != nil {
		t.Fatalf("listening for the apiserver's webhook calls: %v", err)
	}
	p := &proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// add puts replica r behind the proxy; it receives connections while its
// /readyz answers 200.
func (p *proxy) add(r *cluster.Replica) *backend {
	b := &backend{r: r, stop: make(chan struct{})}
	p.mu.Lock()
	p.backends = append(p.backends, b)
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		hc := &http.Client{Timeout: proxyPoll}
		t := time.NewTicker(proxyPoll)
		defer t.Stop()
		for {
			resp, err := hc.Get(r.Health + "/readyz")
			if err == nil {
				resp.Body.Close()
			}
			b.ready.Store(err == nil && resp.StatusCode == http.StatusOK)
			select {
			case <-b.stop:
				return
			case <-t.C:
			}
		}
	}()
	return b
}

// waitReady waits until the proxy routes to b.
func (p *proxy) waitReady(t *testing.T, b *backend) {
	t.Helper()
	if err := testkit.Poll(50*time.Millisecond, timeout, b.ready.Load); err != nil {
		t.Fatalf("the proxy never saw the replica on %s ready", b.r.Webhook)
	}
}

// pick is the next ready backend, round robin.
func (p *proxy) pick() *backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.backends {
		b := p.backends[p.next%len(p.backends)]
		p.next++
		if b.ready.Load() {
			return b
		}
	}
	return nil
}

func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false // closed
	}
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer in.Close()
			b := p.pick()
			if b == nil {
				p.noBackend.Add(1)
				return
			}
			out, err := net.Dial("tcp", b.r.Webhook)
			if err != nil {
				p.dialFailed.Add(1)
				return
			}
			defer out.Close()
			b.routed.Add(1)
			if !p.track(in, true) || !p.track(out, true) {
				return
			}
			defer p.track(in, false)
			defer p.track(out, false)
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		}()
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	for _, b := range p.backends {
		close(b.stop)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
