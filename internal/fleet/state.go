package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// State is the alert engine's lifecycle state kept in Redis, so that the
// fleet acts as one engine:
//
//   - the leader saves its engine's Snapshot after every evaluation, and
//     only while its lease still holds its token (a script compares them),
//     so a deposed leader never overwrites its successor's state;
//   - a replica that takes the lease loads the state and Restores it
//     before its first evaluation: an alert fired under the last leader is
//     resolved by the new one, its repeats keep their times, a pending one
//     keeps its start;
//   - every replica's /api/v1/alerts lists the saved state (Active), not
//     only the leader's.
type State struct {
	rdb      *redis.Client
	key      string
	leaseKey string
	log      *slog.Logger
	timeout  time.Duration

	mu       sync.Mutex
	cached   []alert.Tracked
	cachedAt time.Time
	loggedAt time.Time
}

// stateTTL keeps the state a day after the last save: a fleet with no
// leader for that long starts afresh.
const stateTTL = 24 * time.Hour

// saveScript writes the state only while KEYS[1] (the lease) holds the
// saver's token.
var saveScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
`)

// NewState returns the alert state of l's fleet, fenced by l. Its key
// shares the lease's hash tag: the save script touches both, which a
// Redis Cluster allows only within one slot.
func NewState(l *Lease, log *slog.Logger) *State {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &State{rdb: l.rdb, key: l.key + ":state", leaseKey: l.key, log: log, timeout: 2 * time.Second}
}

// ErrBadState is Load's error for a saved state that does not decode
// (corrupt, or written by a version with other fields): a leader then
// starts from no alerts rather than stop alerting until it expires.
var ErrBadState = errors.New("fleet: the alert state in Redis does not decode")

// errNotLeader is Save's error when the lease holds another token.
var errNotLeader = errors.New("fleet: the lease is no longer held: alert state not saved")

// Save stores ts as the fleet's alert state, fenced by token (Lease.Token).
func (s *State) Save(ctx context.Context, token string, ts []alert.Tracked) error {
	b, err := json.Marshal(finite(ts))
	if err != nil {
		return fmt.Errorf("encode the alert state: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := saveScript.Run(ctx, s.rdb, []string{s.leaseKey, s.key}, token, b, stateTTL.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("save the alert state in Redis: %w", err)
	}
	if n != 1 {
		return errNotLeader
	}
	s.keep(ts)
	return nil
}

// Load reads the fleet's alert state; none saved is an empty state.
func (s *State) Load(ctx context.Context) ([]alert.Tracked, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.rdb.Get(ctx, s.key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the alert state from Redis: %w", err)
	}
	var ts []alert.Tracked
	if err := json.Unmarshal(b, &ts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	s.keep(ts)
	return ts, nil
}

// finite returns ts with the figures JSON cannot hold (NaN, ±Inf: a
// baseline of zero, say) as 0, so that one odd figure never stops the
// state from being saved; the next evaluation computes them again.
func finite(ts []alert.Tracked) []alert.Tracked {
	out, cloned := ts, false
	for i, t := range ts {
		a := &t.Alert
		if ok(a.Value) && ok(a.Threshold) && ok(a.Baseline) {
			continue
		}
		if !cloned {
			out, cloned = slices.Clone(ts), true
		}
		for _, f := range []*float64{&a.Value, &a.Threshold, &a.Baseline} {
			if !ok(*f) {
				*f = 0
			}
		}
		out[i] = t
	}
	return out
}

func ok(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// logFailure logs a failed read of the state at most once a minute.
func (s *State) logFailure(err error) {
	s.mu.Lock()
	due := time.Since(s.loggedAt) >= time.Minute
	if due {
		s.loggedAt = time.Now()
	}
	s.mu.Unlock()
	if due {
		s.log.Warn("alerts listed without a fresh read of the fleet's state", "err", err)
	}
}

func (s *State) keep(ts []alert.Tracked) {
	s.mu.Lock()
	s.cached, s.cachedAt = ts, time.Now()
	s.mu.Unlock()
}

// cacheFor is how long Active answers from the last read: a dashboard
// polling every few seconds costs Redis one read per replica a second.
const cacheFor = time.Second

// Active lists the fleet's alerts for a replica's API: the saved state
// (the leader's rules and what it raised) together with the alerts this
// replica raised itself (local, its engine's Snapshot; quota alerts are
// raised where the request was). If Redis cannot be read, the last state
// read is used, and with none, local alone. Raised alerts past their end
// are left out.
func (s *State) Active(ctx context.Context, local []alert.Tracked) []alert.Alert {
	s.mu.Lock()
	shared, fresh := s.cached, time.Since(s.cachedAt) < cacheFor
	if !fresh {
		s.cachedAt = time.Now() // a failed read too: Redis is asked at most once a second
	}
	s.mu.Unlock()
	if !fresh {
		if ts, err := s.Load(ctx); err != nil {
			s.logFailure(err)
		} else {
			shared = ts
		}
	}
	now := time.Now()
	byFP := make(map[string]alert.Tracked, len(shared)+len(local))
	for _, t := range shared {
		if t.Until.IsZero() || now.Before(t.Until) {
			byFP[t.Alert.Fingerprint] = t
		}
	}
	for _, t := range local {
		// Raised here and not over (only the leader's evaluations end
		// raised alerts); a rule's alert is the leader's to say.
		if !t.Until.IsZero() && now.Before(t.Until) {
			byFP[t.Alert.Fingerprint] = t
		}
	}
	all := make([]alert.Tracked, 0, len(byFP))
	for _, t := range byFP {
		all = append(all, t)
	}
	return alert.ActiveOf(all)
}
