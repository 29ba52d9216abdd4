package server

import (
	"net"
	"sync/atomic"
)

// limitListener caps the connections open at once. Unlike
// golang.org/x/net/netutil.LimitListener, which stops accepting when full,
// it accepts and closes at once the connections over the cap: a client
// (the apiserver) then fails fast and its failurePolicy decides, instead of
// waiting in the kernel's backlog for its webhook timeout. It wraps the
// plain TCP listener, so a refused connection costs no TLS handshake.
type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

func newLimitListener(l net.Listener, max int) *limitListener {
	return &limitListener{Listener: l, max: int64(max)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			rejectedConnections.Inc()
			// Nothing to tell the client: no TLS session exists yet.
			_ = c.Close()
			continue
		}
		openConnections.Inc()
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// limitedConn gives its slot back on its first Close (net/http may close
// a connection more than once).
type limitedConn struct {
	net.Conn
	l      *limitListener
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		openConnections.Dec()
	}
	return c.Conn.Close()
}
