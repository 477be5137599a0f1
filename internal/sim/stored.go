package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
)

// storedResponses bounds how many finished responses GET
// /v1/responses/{id} can return; the oldest are forgotten first.
const storedResponses = 1000

// responseStore keeps the last finished Responses API answers, for the
// retrieval routes and previous_response_id. vLLM keeps them only with
// VLLM_ENABLE_RESPONSES_API_STORE and never forgets; the sim bounds them.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*storedResponse
	order []string // oldest first; may hold ids since deleted
}

type storedResponse struct {
	resp  responseObject
	input []item // this request's input, with ids
	convo []item // what a follow-up continues: earlier turns, input, output
}

func newResponseStore() *responseStore {
	return &responseStore{byID: make(map[string]*storedResponse)}
}

// put stores a finished response with the input it answered.
func (s *responseStore) put(input, convo []item, resp responseObject) {
	in := make([]item, len(input))
	for i, it := range input {
		c := make(item, len(it)+2)
		for k, v := range it {
			c[k] = v
		}
		if _, ok := c["id"]; !ok {
			c["id"] = itemID(idPrefix(it), resp.ID, "input"+strconv.Itoa(i))
		}
		if _, ok := c["status"]; !ok && it["type"] != "reasoning" {
			c["status"] = "completed"
		}
		in[i] = c
	}
	next := append(append([]item(nil), convo...), in...)
	for _, out := range resp.Output {
		var it item
		if json.Unmarshal(marshal(out), &it) == nil {
			next = append(next, it)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[resp.ID]; !ok {
		s.order = append(s.order, resp.ID)
	}
	s.byID[resp.ID] = &storedResponse{resp: resp, input: in, convo: next}
	for len(s.byID) > storedResponses {
		id := s.order[0]
		s.order = s.order[1:]
		delete(s.byID, id)
	}
	if len(s.order) > 2*storedResponses {
		s.order = slices.DeleteFunc(s.order, func(id string) bool { return s.byID[id] == nil })
	}
}

func idPrefix(it item) string {
	switch it["type"] {
	case "function_call":
		return "fc_"
	case "function_call_output":
		return "fco_"
	}
	return "msg_"
}

func (s *responseStore) get(id string) (*storedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byID[id]
	return r, ok
}

func (s *responseStore) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byID[id]
	delete(s.byID, id)
	return ok
}

func notFound(id string) error {
	return errorf(http.StatusNotFound, "Response with id '%s' not found.", id)
}

func (e *Engine) getResponse(w http.ResponseWriter, r *http.Request) error {
	sr, ok := e.stored.get(r.PathValue("id"))
	if !ok {
		return notFound(r.PathValue("id"))
	}
	writeJSON(w, http.StatusOK, sr.resp)
	return nil
}

func (e *Engine) deleteResponse(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !e.stored.remove(id) {
		return notFound(id)
	}
	writeJSON(w, http.StatusOK, struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{id, "response", true})
	return nil
}

// cancelResponse answers as vLLM does for a response that was not created
// in the background: the sim has no background mode, so there is never
// anything to cancel.
func (e *Engine) cancelResponse(w http.ResponseWriter, r *http.Request) error {
	if _, ok := e.stored.get(r.PathValue("id")); !ok {
		return notFound(r.PathValue("id"))
	}
	return errorf(http.StatusBadRequest, "Cannot cancel a synchronous response.")
}

// listInputItems pages through a stored response's input items with
// OpenAI's order (desc by default), limit (20) and after parameters.
func (e *Engine) listInputItems(w http.ResponseWriter, r *http.Request) error {
	sr, ok := e.stored.get(r.PathValue("id"))
	if !ok {
		return notFound(r.PathValue("id"))
	}
	qv := r.URL.Query()
	limit := 20
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return errorf(http.StatusBadRequest, "limit: must be an integer within [1, 100], got %q", v)
		}
		limit = n
	}
	items := slices.Clone(sr.input)
	switch qv.Get("order") {
	case "", "desc":
		slices.Reverse(items)
	case "asc":
	default:
		return errorf(http.StatusBadRequest, "order: want asc or desc, got %q", qv.Get("order"))
	}
	if after := qv.Get("after"); after != "" {
		i := slices.IndexFunc(items, func(it item) bool { return it["id"] == after })
		if i < 0 {
			return errorf(http.StatusBadRequest, "after: no input item %q in response %s", after, sr.resp.ID)
		}
		items = items[i+1:]
	}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	list := struct {
		Object  string  `json:"object"`
		Data    []item  `json:"data"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		HasMore bool    `json:"has_more"`
	}{Object: "list", Data: items, HasMore: more}
	if len(items) > 0 {
		first, last := fmt.Sprint(items[0]["id"]), fmt.Sprint(items[len(items)-1]["id"])
		list.FirstID, list.LastID = &first, &last
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}
