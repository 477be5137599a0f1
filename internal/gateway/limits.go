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

// What a client or an upstream can make the gateway hold, and for how
// long: the time a request body may take (BodyDeadline), the connections
// of one TCP peer (LimitConns), and the bytes of non-streamed answers held
// at once, all requests together (budget). The request and response size
// limits themselves are applied where the bodies are read.

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
		// Counted before the close, so that whoever sees the connection
		// refused also sees it counted.
		l.refused.Inc()
		_ = c.Close()
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

// Why reading a non-streamed answer stopped early.
var (
	errBufferFull = errors.New("the budget for buffered answers (limits.max_buffered_bytes) is spent")
	errTooLarge   = errors.New("answer larger than limits.max_response_bytes")
)

// budget bounds the bytes of non-streamed answers held in memory at once,
// all requests together (limits.max_buffered_bytes). An answer is read
// into a buffer that grows as its bytes arrive, and each buffer is taken
// from the budget before it is made, so an announced Content-Length
// reserves nothing ahead of the bytes it announces. A read that finds the
// budget spent fails at once rather than wait: the answer is already on
// its way, and waiting would hold the upstream connection and what was
// read. Taking and giving back are atomic adds; no lock is held.
type budget struct {
	limit   int64
	used    atomic.Int64
	peak    atomic.Int64 // the most held at once since start
	refused prometheus.Counter
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_gateway_buffer_refused_total",
		Help: "Non-streamed answers refused with 503 buffer_full because limits.max_buffered_bytes was held by other answers."})}
}

// collectors are the budget's metrics: bytes held now and at most, and
// the answers refused.
func (b *budget) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_gateway_buffered_bytes",
			Help: "Bytes of non-streamed answers held in memory now (bound: limits.max_buffered_bytes)."},
			func() float64 { return float64(b.used.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_gateway_buffered_bytes_peak",
			Help: "The most bytes of non-streamed answers held at once since start: what limits.max_buffered_bytes had to cover."},
			func() float64 { return float64(b.peak.Load()) }),
		b.refused,
	}
}

func (b *budget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// heldBody is an answer read whole and the part of the budget it holds
// until release.
type heldBody struct {
	b    []byte
	held int64
	bud  *budget
}

func (h *heldBody) release() {
	h.bud.give(h.held)
	h.held = 0
}

// minBuffer is the first buffer of an answer whose length is not
// announced; it doubles from there.
const minBuffer = 16 << 10

// read reads r whole, up to limit bytes (errTooLarge beyond). size is the
// announced length, -1 when unknown: a buffer of exactly that size is made
// when it is within limit, and a growing one otherwise. A full buffer
// reads one more byte before a larger one is made, so an answer ending
// exactly at its buffer's end needs no other. Growing takes the new buffer
// from the budget before making it and gives the old one back once
// copied: both exist meanwhile, which is why limits.max_buffered_bytes is
// at least twice limits.max_response_bytes. The garbage the collector has
// yet to free is not counted. The caller releases the result, whatever
// the error.
func (b *budget) read(r io.Reader, limit, size int64) (heldBody, error) {
	h := heldBody{bud: b}
	first := min(int64(minBuffer), limit)
	if size >= 0 && size <= limit {
		first = size
	}
	if err := h.grow(first); err != nil {
		return h, err
	}
	for {
		if len(h.b) < cap(h.b) {
			n, err := r.Read(h.b[len(h.b):cap(h.b)])
			h.b = h.b[:len(h.b)+n]
			if err == io.EOF {
				return h, nil
			}
			if err != nil {
				return h, err
			}
			continue
		}
		var one [1]byte
		n, err := r.Read(one[:])
		if n > 0 {
			if int64(len(h.b)) >= limit {
				return h, errTooLarge
			}
			if gerr := h.grow(min(max(2*int64(cap(h.b)), minBuffer), limit)); gerr != nil {
				return h, gerr
			}
			h.b = append(h.b, one[0])
		}
		if err == io.EOF {
			return h, nil
		}
		if err != nil {
			return h, err
		}
	}
}

// grow moves h's bytes to a buffer of capacity n taken from the budget.
func (h *heldBody) grow(n int64) error {
	if n == 0 {
		return nil
	}
	if !h.bud.take(n) {
		h.bud.refused.Inc()
		return errBufferFull
	}
	nb := make([]byte, len(h.b), n)
	copy(nb, h.b)
	h.bud.give(h.held)
	h.b, h.held = nb, n
	return nil
}
