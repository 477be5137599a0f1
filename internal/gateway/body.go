package gateway

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// readBody reads a JSON request body, bounded by limits.max_request_bytes
// and in time by limits.body_timeout (BodyDeadline; 408). On an error it
// returns what arrived.
// What it accepts is deliberate (docs/api.md, "Request bodies"):
//
//   - Content-Type application/json, any application/*+json, or none at
//     all (many small clients send none); anything else — text/plain,
//     multipart/form-data, a form — is refused with 415 naming the header,
//     rather than parsed as JSON by accident.
//   - Content-Encoding identity or gzip; a gzip body is decompressed here,
//     the bound applying to the decompressed bytes (a small bomb cannot
//     expand past it), and goes upstream plain. A body that says gzip and
//     is not, or any other encoding, is refused naming the header.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if e := checkContentType(r.Header.Get("Content-Type")); e != nil {
		return nil, e
	}
	limit := g.cfg.Limits.MaxRequestBytes
	raw := http.MaxBytesReader(w, r.Body, limit)
	var src io.Reader = raw
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return nil, g.bodyReadError(err, true)
		}
		defer zr.Close()
		// One byte past the limit tells "too large" from "exactly the limit".
		src = io.LimitReader(zr, limit+1)
	default:
		return nil, &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_encoding",
			Message: "Content-Encoding " + echo(ce) + " is not supported; send the body plain or gzip-compressed."}
	}
	body, err := io.ReadAll(src)
	if err != nil {
		return body, g.bodyReadError(err, src != io.Reader(raw))
	}
	if int64(len(body)) > limit {
		return nil, tooLarge()
	}
	return body, nil
}

// bodyReadError names why a body could not be read: too large, too slow,
// not the gzip it claimed to be, or the client gone.
func (g *Gateway) bodyReadError(err error, gzipped bool) *apiError {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded): // BodyDeadline's
		return &apiError{Kind: record.ErrBodyTimeout, Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: record.ErrBodyTimeout,
			Message: fmt.Sprintf("The request body did not arrive within the gateway's limit (limits.body_timeout: %v).", g.cfg.Limits.BodyTimeout)}
	case gzipped && (errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		return &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request",
			Message: "The body is not valid gzip, although Content-Encoding says gzip."}
	}
	return &apiError{Kind: record.ErrClientDisconnect, Status: record.StatusClientClosed, Type: "invalid_request_error", Code: record.ErrClientDisconnect,
		Message: "client closed the connection while sending the request"}
}

func tooLarge() *apiError {
	return &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: "Request body is larger than the gateway's limit (limits.max_request_bytes)."}
}

// checkContentType accepts JSON or no Content-Type at all.
func checkContentType(v string) *apiError {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(v)
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
		Message: "Content-Type " + echo(v) + " is not supported here; send a JSON body with Content-Type: application/json."}
}
