package record

import "time"

// The ids tollgate makes lead with their time, then random bits. The
// ledger's key and its indexes on logical_request_id and trace_id are
// B-trees: a random key lands on a random leaf, and on a ledger of
// millions of rows that leaf is seldom cached, so each insert reads and
// dirties a random page per index. A key that starts with the time lands
// at the right edge, whose pages stay hot. The random part keeps ids
// unique without coordination between replicas: at least 64 random bits
// behind each time prefix.
//
// The callers own the randomness (the gateway's lock-free math/rand/v2,
// the ledger benchmark's seeded generator), so both write the same layout.

// RequestIDLen is the length of an id NewRequestID makes.
const RequestIDLen = 4 + 12 + 16

// NewRequestID returns tollgate's id for a request arriving at t: "req_",
// 12 hex digits of t's Unix milliseconds, big-endian so that ids sort by
// time as strings (until the year 10889), then 16 hex digits of rnd.
// Retried attempts append ".a<N>" to the first attempt's id.
func NewRequestID(t time.Time, rnd uint64) string {
	var b [RequestIDLen]byte
	copy(b[:], "req_")
	putHex(b[4:16], uint64(t.UnixMilli()))
	putHex(b[16:], rnd)
	return string(b[:])
}

// NewTraceID returns a W3C trace id (32 lower-case hex digits) for a trace
// started at t: 8 hex digits of t's Unix seconds, then 24 of hi and lo —
// the AWS X-Ray layout, 96 random bits. The time prefix is never zero
// after 1970, so the id is never the invalid all-zero one. Samplers that
// read the id's last 8 bytes (OpenTelemetry's TraceIDRatioBased) see only
// random bits. The W3C level-2 "random" flag is not claimed: the first
// bytes are not random.
func NewTraceID(t time.Time, hi uint32, lo uint64) string {
	var b [32]byte
	putHex(b[:8], uint64(uint32(t.Unix())))
	putHex(b[8:16], uint64(hi))
	putHex(b[16:], lo)
	return string(b[:])
}

// putHex writes the low 4·len(dst) bits of v into dst as lower-case hex,
// most significant digit first.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = "0123456789abcdef"[v&15]
		v >>= 4
	}
}
