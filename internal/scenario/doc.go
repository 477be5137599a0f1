// Package scenario holds end-to-end alerting scenarios, in test files
// only: the real simulator (internal/sim) behind the real gateway
// (internal/gateway), both served over HTTP on an in-memory network
// (internal/memnet), with clients sending OpenAI-compatible chat
// completions at realistic rates. Every finished Record feeds the alerting
// windows (internal/window) and the built-in rules (internal/alert) run on
// them, wired as `tollgate serve` wires them; quota events raise alerts
// through alert.FromQuota.
//
// Rules look at windows of minutes to hours, so each scenario runs in a
// testing/synctest bubble: hours of fake time take seconds. The in-memory
// network is what makes that work, since a goroutine blocked on a real
// socket would stall the fake clock.
//
// Each scenario warms up with steady traffic long enough for the rules'
// baselines, changes one thing (a prompt grows, the load outgrows an
// upstream, a script loops, the model gets verbose, max_tokens is cut),
// and checks which alerts were notified, at which severity and when; a
// steady run with realistic noise must notify nothing at all.
package scenario
