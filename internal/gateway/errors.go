package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is an error the gateway answers itself, rendered in the OpenAI
// error shape so every SDK surfaces it the way it surfaces OpenAI's own.
type apiError struct {
	Status  int
	Type    string // OpenAI error type, e.g. invalid_request_error
	Code    string // machine-readable code; also the Record's error type when set
	Param   string // the request field at fault, if any
	Message string
}

func (e *apiError) Error() string { return e.Message }

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() []byte {
	o := errorObject{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		o.Param = &e.Param
	}
	if e.Code != "" {
		o.Code = &e.Code
	}
	b, _ := json.Marshal(errorBody{Error: o})
	return b
}

// writeError is the one adapter from a gateway error to the wire.
func writeError(w http.ResponseWriter, e *apiError) int {
	b := e.body()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
	return len(b)
}

// streamError is the event that ends a stream the gateway has to cut
// after the client already received 200 and some chunks: OpenAI's SDKs
// raise it as an API error instead of silently returning a short answer.
func streamError(e *apiError) []byte {
	b := e.body()
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

func badRequest(param, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Param: param, Message: msg}
}
