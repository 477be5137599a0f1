// Package label bounds the values a client can influence before they
// become Prometheus label values (internal/metrics) or alerting-window
// keys (internal/window). It sits after the ledger in the request flow:
// the ledger keeps every real value; what is folded here is only how the
// aggregates are cut.
//
// Each dimension is a Set: the values configuration names always pass;
// up to a limit more are learned first come, first served; the rest fold
// into Other and are counted by tollgate_label_values_folded_total, so an
// operator sees the bound was reached. A value that is not valid UTF-8
// (which would make client_golang panic) never becomes a label.
package label

import (
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Other is the value a dimension folds into past its bound.
const Other = "other"

// Set is one bounded dimension. It is safe for concurrent use; the common
// case (a value already known) takes a read lock only.
type Set struct {
	mu     sync.RWMutex
	names  map[string]struct{}
	limit  int
	folded prometheus.Counter
}

// NewSet returns a Set holding known, which may learn up to extra more.
func NewSet(known []string, extra int, folded prometheus.Counter) *Set {
	s := &Set{names: make(map[string]struct{}, len(known)), limit: len(known) + max(extra, 0), folded: folded}
	for _, k := range known {
		s.names[k] = struct{}{}
	}
	s.limit = max(s.limit, len(s.names))
	return s
}

// Value is v when it is known or can still be learned, Other otherwise,
// counting the fold. learn=false never adds a value (a failed request
// must not teach the set a name a client invented).
func (s *Set) Value(v string, learn bool) string { return s.value(v, learn, true) }

// Again is Value for a second consumer of the same Record (the windows
// after the metrics): the same answer, the fold not counted twice.
func (s *Set) Again(v string, learn bool) string { return s.value(v, learn, false) }

func (s *Set) value(v string, learn, count bool) string {
	if v == "" || v == Other {
		return v
	}
	s.mu.RLock()
	_, found := s.names[v]
	s.mu.RUnlock()
	if found {
		return v
	}
	if !learn || !utf8.ValidString(v) {
		return s.fold(count)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, found := s.names[v]; found {
		return v
	}
	if len(s.names) >= s.limit {
		return s.fold(count)
	}
	s.names[v] = struct{}{}
	return v
}

func (s *Set) fold(count bool) string {
	if count && s.folded != nil {
		s.folded.Inc()
	}
	return Other
}

// Len is how many values the set holds.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.names)
}

// LearnModel says whether a request may teach the model set its model:
// it was sent upstream and the upstream did not refuse the model (404, or
// 400/422 for a bad request). A request refused by the gateway, or a
// model the engine does not know, never teaches it; a request that failed
// in the engine does, so error rates by model see it on every replica.
func LearnModel(sentUpstream bool, upstreamStatus int) bool {
	switch upstreamStatus {
	case 400, 404, 422:
		return false
	}
	return sentUpstream
}

// Config says what each dimension knows and how many more it may learn.
type Config struct {
	Models, BizLines       []string // configured: always their own value
	MaxModels, MaxBizLines int      // learned beyond those
	MaxTemplates           int      // templates are all learned
}

// Bounds are the bounded dimensions shared by the metrics and the windows,
// so both cut the traffic the same way.
type Bounds struct {
	Model, BizLine, Template, FinishReason *Set
}

// FinishReasons are the finish reasons the engines and APIs tollgate
// meters report; any other string an upstream sends is folded.
var FinishReasons = []string{"stop", "length", "tool_calls", "function_call", "content_filter", "abort", "error",
	"cancelled", "eos", "stop_sequence", "end_turn", "max_tokens", "tool_use", "refusal", "pause_turn", "incomplete"}

// New builds the Bounds, registering the fold counter on reg (nil: none).
func New(reg prometheus.Registerer, cfg Config) *Bounds {
	folded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_label_values_folded_total",
		Help: "Requests whose value of a client- or upstream-influenced dimension (model, biz_line, template, finish_reason) was folded into \"other\" in metrics and alerting windows because the dimension reached its bound; the ledger keeps the real value.",
	}, []string{"label"})
	if reg != nil {
		reg.MustRegister(folded)
	}
	return &Bounds{
		Model:        NewSet(cfg.Models, cfg.MaxModels, folded.WithLabelValues("model")),
		BizLine:      NewSet(cfg.BizLines, cfg.MaxBizLines, folded.WithLabelValues("biz_line")),
		Template:     NewSet(nil, cfg.MaxTemplates, folded.WithLabelValues("template")),
		FinishReason: NewSet(FinishReasons, 0, folded.WithLabelValues("finish_reason")),
	}
}
