package store

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/internal/capture"
)

// Captures keeps the opt-in captures of slow or failed requests (see
// internal/capture): their redacted request and response text, in a table
// of its own — never the ledger — with its own retention (Prune honours
// Retention.Captures) and read only through the admin API. Every backend
// implements it and passes storetest.RunCaptures.
type Captures interface {
	// AddCaptures writes captures in one batch. It is idempotent by
	// RequestID: a capture whose RequestID is stored already is skipped
	// (the first write wins).
	AddCaptures(ctx context.Context, cs []*capture.Capture) error
	// Captures lists captures matching f, newest At first (RequestID
	// breaks ties), without their bodies: RequestBytes and ResponseBytes
	// say how long they are (a listing of 1000 never reads 2000 bodies).
	Captures(ctx context.Context, f CaptureFilter) ([]*capture.Capture, error)
	// Capture returns one capture by RequestID, with its bodies and their
	// lengths, or ErrNotFound.
	Capture(ctx context.Context, requestID string) (*capture.Capture, error)
	// PruneCaptures deletes the captures taken before cut and returns how
	// many went.
	PruneCaptures(ctx context.Context, cut time.Time) (int64, error)
}

// CaptureFilter selects captures. Zero fields do not filter.
type CaptureFilter struct {
	Since, Until time.Time // At in [Since, Until)
	Reason       string    // "failed" or "slow"
	Limit        int       // 0 (or less) means 100
}
