// Package memnet is an in-memory network for tests: listeners by address,
// and a dialer that connects to them with net.Pipe. A net/http server
// serves a memnet Listener, and a client or a gateway dials through
// Network.DialContext (an http.Transport's DialContext).
//
// Its reason to exist is testing/synctest: a goroutine blocked reading a
// real socket is not durably blocked, so a bubble whose servers talk TCP
// never advances its fake clock. net.Pipe connections are made of
// channels, so a goroutine waiting on one is durably blocked as long as the
// pipe was created inside the bubble. Create the Network, its listeners
// and every connection inside the bubble that uses them.
//
// Only tests use it.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// Addr is a memnet address, "host:port" by convention.
type Addr string

// Network is "memnet".
func (Addr) Network() string  { return "memnet" }
func (a Addr) String() string { return string(a) }

// Network is a set of listeners by address. The zero value is ready.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
	clients   atomic.Int64 // numbers the clients' local addresses
}

// New returns an empty network.
func New() *Network { return &Network{} }

// Listen listens on addr, which must not be in use.
func (n *Network) Listen(addr string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners == nil {
		n.listeners = map[string]*Listener{}
	}
	if _, ok := n.listeners[addr]; ok {
		return nil, &net.OpError{Op: "listen", Net: "memnet", Addr: Addr(addr), Err: syscall.EADDRINUSE}
	}
	l := &Listener{n: n, addr: Addr(addr), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// DialContext connects to the listener at addr; it has the signature of
// net.Dialer.DialContext, and any network name is accepted. It waits
// until the listener accepts, the listener closes (connection refused)
// or ctx ends. With no listener at addr the connection is refused.
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: network, Addr: Addr(addr), Err: syscall.ECONNREFUSED}
	if l == nil {
		return nil, refused
	}
	local := Addr("client-" + strconv.FormatInt(n.clients.Add(1), 10))
	client, server := net.Pipe()
	select {
	case l.conns <- &conn{Conn: server, local: l.addr, remote: local}:
		return &conn{Conn: client, local: local, remote: l.addr}, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, refused
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Addr: Addr(addr), Err: ctx.Err()}
	}
}

// Listener is a net.Listener on a Network.
type Listener struct {
	n     *Network
	addr  Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// Accept waits for the next connection, or returns net.ErrClosed once the
// listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "memnet", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops accepting and frees the address; connections already
// accepted stay open. Closing twice is an error, as for a socket.
func (l *Listener) Close() error {
	err := errors.New("memnet: listener already closed")
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[string(l.addr)] == l {
			delete(l.n.listeners, string(l.addr))
		}
		l.n.mu.Unlock()
		err = nil
	})
	if err != nil {
		return &net.OpError{Op: "close", Net: "memnet", Addr: l.addr, Err: err}
	}
	return nil
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.addr }

// URL is the base URL of an HTTP server on the listener, "http://addr".
func (l *Listener) URL() string { return fmt.Sprintf("http://%s", l.addr) }

// conn is a pipe end with the addresses of its two sides (net.Pipe's own
// are both "pipe").
type conn struct {
	net.Conn
	local, remote Addr
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }
