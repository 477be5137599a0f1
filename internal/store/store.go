// Package store is where finished Records go. It sits at the end of the
// request flow: the gateway hands each Record to a Writer (a bounded queue,
// never blocking the proxy), the Writer inserts them in batches into a
// Store, and the CLI, reports and dashboard read them back from the Store.
//
// Backends live in sub-packages (sqlite/, clickhouse/) and all pass the one
// conformance suite in storetest/.
package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Store persists Records. Implementations must be safe for concurrent use.
//
// Every Record gets a ledger row (every request, failed and cancelled too).
// A Record with Sampled set also keeps its detail (the token timeline).
type Store interface {
	// Insert writes b.Records in one transaction. The Records are
	// finished: Finish ran after their last change (a backend may store
	// the derived figures as they are). It is idempotent by RequestID:
	// inserting a Record whose RequestID is already stored is a no-op for
	// that Record (the first write wins), never a second row and never an
	// error — whatever b.FirstDelivery says. Insert neither modifies the
	// Records nor keeps b.Records after it returns: the Writer reuses the
	// slice for its next batch.
	Insert(ctx context.Context, b Batch) error

	// Requests returns ledger rows matching f, newest arrival first. It
	// reads the ledger only, so no Record comes back with a Timeline, not
	// even a sampled one: listing must stay cheap on months of data.
	Requests(ctx context.Context, f Filter) ([]*record.Record, error)

	// Request returns every attempt of one request, ordered by attempt,
	// given its LogicalRequestID or the RequestID of any of its attempts.
	// Sampled attempts come back with their Timeline, the others without.
	// It returns ErrNotFound when nothing matches.
	Request(ctx context.Context, id string) ([]*record.Record, error)

	// Close releases the store. It does not flush Writers: cancel their
	// Run and wait for it to return first.
	Close() error
}

// Batch is what Insert writes: Records, and what the caller knows of
// where they have been.
type Batch struct {
	Records []*record.Record
	// FirstDelivery is the caller's word that no Record of the batch was
	// handed to any store before, by this process or an earlier one — as
	// the write-ahead queue's shipper knows of a batch it sends for the
	// first time (wal.Batch.Redelivery false), or the Writer of its first
	// attempt. A store whose idempotency costs a read may skip that read
	// then: ClickHouse's look-up of stored ids reads the ids of the
	// batch's whole days, and is what made its insert slower as a day
	// filled up. What reads show does not change: a RequestID that a
	// client sent twice still reads as its first write. The zero value
	// (false: nothing is known) is always safe.
	FirstDelivery bool
}

// Filter selects ledger rows. Zero fields do not filter.
type Filter struct {
	Since, Until time.Time // arrival in [Since, Until)
	UserID       string
	BizLine      string
	Model        string
	TraceID      string
	TemplateID   string
	Endpoint     string // chat, completions, embeddings, responses, messages, …
	EndUser      string // the end user the request body named
	// ClientRequestID: the X-Request-Id a client sent (several requests
	// may share one).
	ClientRequestID string
	Status          int
	ErrorsOnly      bool          // error_type != ""
	MinE2E          time.Duration // "slow only"
	Limit           int           // 0 (or less) means 100
	// Sort, when set, orders the rows by that figure, largest first (then
	// newest first): one of Sorts. Rows without it (no first token) come
	// last. Empty is newest first.
	Sort string
}

// Sorts are the figures Requests may order rows by, with the ledger
// column of each (the same in every backend).
var Sorts = map[string]string{
	"ttft": "ttft_ns", "e2e": "e2e_ns", "input": "input_tokens", "output": "output_tokens", "cost": "cost_nanos",
}

// SortColumn is the column f.Sort orders by, "" for newest first; an
// unknown sort is an error naming the known ones.
func (f Filter) SortColumn() (string, error) {
	if f.Sort == "" {
		return "", nil
	}
	c, ok := Sorts[f.Sort]
	if !ok {
		return "", fmt.Errorf("unknown sort %q; one of %s", f.Sort, strings.Join(slices.Sorted(maps.Keys(Sorts)), ", "))
	}
	return c, nil
}

// ErrNotFound is returned by Request when no record matches.
var ErrNotFound = errNotFound{}

type errNotFound struct{}

func (errNotFound) Error() string { return "request not found" }

// ErrNotConnected is wrapped by the errors of a store that has not reached
// its server yet: ClickHouse opened by serve during an outage, which
// connects in the background (the ledger's Records wait in the
// write-ahead queue meanwhile). A caller may retry later; the API answers
// 503.
var ErrNotConnected = errors.New("store not connected")
