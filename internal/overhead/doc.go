// Package overhead is the gateway's overhead harness (tollgate bench
// overhead): it measures what tollgate adds to a request compared with
// going straight to the engine and with a bare reverse proxy.
//
// It sits outside the request flow, around it:
//
//	load driver ──▶ arm ──▶ mock upstream
//
// where an arm is D (direct to the mock), A (a bare httputil.ReverseProxy),
// B (tollgate serve with its full accounting: Records, metrics, rating,
// alert windows, the write-ahead queue and the SQLite ledger) or B0
// (tollgate serve with store.durability: off). Each arm other than D is a
// process of its own, pinned to one CPU with GOMAXPROCS=1, so its CPU time
// (utime+stime from /proc/PID/stat) is its own; the load driver and the
// mock share the other CPU. The driver measures added latency at fixed
// rates, throughput and CPU per request at saturation, time to first token
// and inter-token latency of SSE streams with frames counted, and after
// the run the ledger is checked against what the mock sent.
package overhead
