package sim

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FaultHeader selects faults for one request; see the package doc for its
// syntax.
const FaultHeader = "X-Sim-Fault"

// OutputTokensHeader pins the output length of one request.
const OutputTokensHeader = "X-Sim-Output-Tokens"

// faultPlan is what goes wrong with one request. Positions count content
// tokens sent before the fault; -1 means never.
type faultPlan struct {
	status      int // > 0: fail with this status before any byte
	resetAt     int
	stallAt     int
	stallFor    time.Duration
	malformedAt int
}

func noFaults() faultPlan { return faultPlan{resetAt: -1, stallAt: -1, malformedAt: -1} }

// parseFaults reads an X-Sim-Fault value. stallFor is the default stall.
func parseFaults(v string, stallFor time.Duration) (faultPlan, error) {
	p := noFaults()
	p.stallFor = stallFor
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" || item == "none" {
			continue
		}
		key, val, hasVal := strings.Cut(item, "=")
		var err error
		switch key {
		case "error":
			p.status = http.StatusInternalServerError
			if hasVal {
				p.status, err = parseStatus(val)
			}
		case "status":
			p.status, err = parseStatus(val)
		case "reset-after":
			p.resetAt, err = parseCount(val)
		case "malformed-after":
			p.malformedAt, err = parseCount(val)
		case "stall-after":
			n, d, ok := strings.Cut(val, ":")
			p.stallAt, err = parseCount(n)
			if err == nil && ok {
				p.stallFor, err = time.ParseDuration(d)
				if err == nil && p.stallFor < 0 {
					err = fmt.Errorf("negative duration %s", d)
				}
			}
		default:
			err = fmt.Errorf("unknown fault (want none, error[=STATUS], status=STATUS, reset-after=N, stall-after=N[:DURATION], malformed-after=N)")
		}
		if err != nil {
			return faultPlan{}, fmt.Errorf("%s: %q: %w", FaultHeader, item, err)
		}
	}
	return p, nil
}

func parseStatus(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 400 || n > 599 {
		return 0, fmt.Errorf("status must be 400-599, got %q", s)
	}
	return n, nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("token count must be a non-negative integer, got %q", s)
	}
	return n, nil
}

// headerFaults returns the request's own fault plan, or nil when it has
// none.
func (e *Engine) headerFaults(r *http.Request) (*faultPlan, error) {
	v, ok := r.Header[http.CanonicalHeaderKey(FaultHeader)]
	if !ok {
		return nil, nil
	}
	p, err := parseFaults(strings.Join(v, ","), e.cfg.Faults.StallFor)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	return &p, nil
}

// drawFaults draws a plan from the configured rates for a request that
// will generate total tokens. It always takes the same draws so that the
// rest of the request's randomness does not depend on the rates.
func (e *Engine) drawFaults(rng *rand.Rand, total int) faultPlan {
	f := e.cfg.Faults
	p := noFaults()
	p.stallFor = f.StallFor
	uErr, uReset, uStall, uBad := rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64()
	at := rng.IntN(total + 1)
	if uErr < f.ErrorRate {
		p.status = http.StatusInternalServerError
	}
	if uReset < f.ResetRate {
		p.resetAt = at
	}
	if uStall < f.StallRate {
		p.stallAt = at
	}
	if uBad < f.MalformedRate {
		p.malformedAt = at
	}
	return p
}

// clamp moves every fault of a plan within a response of total tokens, so
// that a fault asked for after the end still fires, before the finish.
func (p *faultPlan) clamp(total int) {
	for _, at := range []*int{&p.resetAt, &p.stallAt, &p.malformedAt} {
		if *at > total {
			*at = total
		}
	}
}

func faultMessage(status int) string {
	text := http.StatusText(status)
	switch {
	case status == http.StatusTooManyRequests:
		return "simulated fault: rate limit exceeded, please retry later"
	case status == statusOverloaded:
		text = "overloaded"
	case text == "":
		text = "status " + strconv.Itoa(status)
	}
	return "simulated fault: " + strings.ToLower(text)
}

// statusOverloaded is Anthropic's "overloaded" status, which net/http
// does not name.
const statusOverloaded = 529
