package server

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// limitListener caps the connections open at once, in all and from each
// source address. Unlike golang.org/x/net/netutil.LimitListener, which
// stops accepting when full, it accepts and closes at once the connections
// over a cap: a client (the apiserver) then fails fast and its
// failurePolicy decides, instead of waiting in the kernel's backlog for its
// webhook timeout. It wraps the plain TCP listener, so a refused connection
// costs no TLS handshake.
//
// The cap per source address keeps one client from taking every
// connection: a client holding its share leaves the rest to the others
// (the apiservers). Its map holds the addresses with a connection open
// only, so it is bounded by the global cap.
type limitListener struct {
	net.Listener
	max       int64
	perClient int
	open      atomic.Int64

	mu       sync.Mutex
	byClient map[netip.Addr]int
}

func newLimitListener(l net.Listener, max, perClient int) *limitListener {
	return &limitListener{Listener: l, max: int64(max), perClient: perClient, byClient: map[netip.Addr]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c, rejectedMaxConnections)
			continue
		}
		client, ok := sourceAddr(c.RemoteAddr())
		if ok && !l.take(client) {
			l.open.Add(-1)
			l.refuse(c, rejectedMaxConnectionsPerClient)
			continue
		}
		openConnections.Inc()
		return &limitedConn{Conn: c, l: l, client: client, counted: ok}, nil
	}
}

// refuse closes a connection over a cap. Nothing to tell the client: no
// TLS session exists yet.
func (l *limitListener) refuse(c net.Conn, reason string) {
	rejectedConnections.WithLabelValues(reason).Inc()
	_ = c.Close()
}

// take counts a connection from client; false, and uncounted, when client
// already holds its share.
func (l *limitListener) take(client netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byClient[client] >= l.perClient {
		return false
	}
	l.byClient[client]++
	return true
}

// give hands back a connection take counted; an address with none left
// leaves the map.
func (l *limitListener) give(client netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.byClient[client] - 1; n > 0 {
		l.byClient[client] = n
	} else {
		delete(l.byClient, client)
	}
}

// clients is how many source addresses hold a connection (for tests).
func (l *limitListener) clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byClient)
}

// sourceAddr is a connection's source IP address, IPv4-mapped IPv6
// addresses as IPv4 (a dual-stack listener sees IPv4 clients so); false
// for an address that is not IP (nothing to key a share on).
func sourceAddr(a net.Addr) (netip.Addr, bool) {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip := ta.AddrPort().Addr().Unmap()
		return ip, ip.IsValid()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// limitedConn gives its slots back on its first Close (net/http may close
// a connection more than once).
type limitedConn struct {
	net.Conn
	l       *limitListener
	client  netip.Addr
	counted bool // in l.byClient
	closed  atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		if c.counted {
			c.l.give(c.client)
		}
		openConnections.Dec()
	}
	return c.Conn.Close()
}
