// Package loadgen is the engine of `tollgate bench`: a load generator for
// any OpenAI-compatible endpoint, whether an engine directly or tollgate in
// front of one:
//
//	tollgate bench ──HTTP (SSE)──▶ [tollgate gateway ──▶] engine (vLLM, sim, …)
//
// It builds requests (workload.go: prompt files or synthetic lengths with
// a shared prefix), sends them open loop at a rate or closed loop at a
// concurrency (driver.go), reads each stream line by line and time-stamps
// every event (client.go), turns each request's event timeline into its
// figures with a pure function (measure.go), and sums a run up like vLLM's
// benchmark_serving (stats.go, render.go).
//
// # Definitions
//
// They follow vLLM's serving benchmark, with the stricter chunk rules of
// tollgate's docs/metrics.md:
//
//   - start: the intended send time. Open loop, that is the request's slot in
//     the arrival schedule, not the moment it left, so a slow server cannot
//     hide the queue it causes (no coordinated omission). Closed loop, the
//     two are the same.
//   - a content chunk carries generated output (delta.content, reasoning,
//     tool_calls, or text); a role-only first delta, a finish-only chunk,
//     the usage chunk and [DONE] are not content.
//   - TTFT = first content chunk − start.
//   - E2E (vLLM's E2EL) = last chunk with choices − start: the usage-only
//     chunk and [DONE] are not part of it.
//   - ITL = every gap between consecutive content chunks.
//   - TPOT = (E2E − TTFT) / (output tokens − 1), only when output tokens > 1.
//   - output tokens: the server's usage (stream_options.include_usage) when
//     it reported one, else the number of content chunks; the result says
//     which.
package loadgen
