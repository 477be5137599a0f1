package gateway

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What a client can make the gateway hold, and for how long: the time a
// request body may take (BodyDeadline) and the connections of one TCP
// peer (LimitConns). The request and response size limits themselves are
// applied where the bodies are read.

// BodyDeadline gives each request with a body d from its arrival to send
// all of it (limits.body_timeout). A body that is late fails its Read
// with os.ErrDeadlineExceeded; the gateway answers 408 and the server
// closes the connection. The deadline is lifted as soon as the body has
// ended: the response — a stream may last many minutes — is not bound by
// it, and neither is the server's background read that notices a client
// leaving mid-response (a read deadline left in place would cancel the
// request when it passed). No write deadline is ever set. A request the
// handler does not read whole (404, 413) keeps the deadline, which also
// bounds what the server reads of it afterwards. A request without a body
// gets no deadline. On HTTP/2 the deadline is the stream's own.
func BodyDeadline(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := *http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the body deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	rc     http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// LimitConns returns ln closing, as soon as they are accepted, the
// connections of a TCP peer that already has max open ones
// (limits.max_conns_per_ip; 0 returns ln as it is). The peer is the
// address the TCP connection comes from: behind a proxy or a load
// balancer that is the proxy's, shared by all its clients, which is why
// the limit must then be above the proxy's own connections to tollgate
// (or 0). Refusals are counted (tollgate_gateway_conns_refused_total) and
// logged at most once a minute; tollgate_gateway_conns_open is what the
// limiter counts.
func LimitConns(ln net.Listener, max int, reg prometheus.Registerer, log *slog.Logger) (net.Listener, error) {
	if max <= 0 {
		return ln, nil
	}
	l := &connLimiter{Listener: ln, max: max, log: log, open: map[string]int{},
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_gateway_conns_refused_total",
			Help: "Connections closed at accept because their TCP peer already had limits.max_conns_per_ip open."})}
	if reg != nil {
		total := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_gateway_conns_open",
			Help: "Client connections open, as counted by the per-peer limit."}, func() float64 { return float64(l.total.Load()) })
		for _, c := range []prometheus.Collector{l.refused, total} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

type connLimiter struct {
	net.Listener
	max     int
	log     *slog.Logger
	refused prometheus.Counter
	total   atomic.Int64
	mu      sync.Mutex
	open    map[string]int // by peer; a peer with none has no entry

	logMu     sync.Mutex
	lastLog   time.Time
	sinceLast int
}

// Accept returns the next connection within the limit; the ones beyond it
// are closed here, unseen by the server.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerOf(c.RemoteAddr())
		l.mu.Lock()
		n := l.open[peer]
		ok := n < l.max
		if ok {
			l.open[peer] = n + 1
		}
		l.mu.Unlock()
		if ok {
			l.total.Add(1)
			return &limitedConn{Conn: c, l: l, peer: peer}, nil
		}
		_ = c.Close()
		l.refused.Inc()
		l.logRefusal(peer)
	}
}

func (l *connLimiter) release(peer string) {
	l.total.Add(-1)
	l.mu.Lock()
	if n := l.open[peer] - 1; n > 0 {
		l.open[peer] = n
	} else {
		delete(l.open, peer)
	}
	l.mu.Unlock()
}

// logRefusal warns at most once a minute, with how many were refused
// since the last line, so a flood does not flood the log too.
func (l *connLimiter) logRefusal(peer string) {
	l.logMu.Lock()
	l.sinceLast++
	now := time.Now()
	if now.Sub(l.lastLog) < time.Minute {
		l.logMu.Unlock()
		return
	}
	n := l.sinceLast
	l.lastLog, l.sinceLast = now, 0
	l.logMu.Unlock()
	if l.log != nil {
		l.log.Warn("connection refused: its TCP peer has limits.max_conns_per_ip connections open (behind a proxy or load balancer, every client shares the proxy's address)",
			"peer", peer, "max_conns_per_ip", l.max, "refused", n)
	}
}

// peerOf is the IP a connection comes from (an IPv4-mapped IPv6 address
// counts as the IPv4 one); for another kind of address, its host part.
func peerOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap().String()
		}
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// limitedConn gives its place back once, at its first Close.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	peer string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.peer) })
	return err
}

// CloseWrite keeps the half-close the server uses, after an error answer,
// to let the client read it before the connection is reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
