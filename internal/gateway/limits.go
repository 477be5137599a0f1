package gateway

import (
	"io"
	"net/http"
	"time"
)

// What a client can make the gateway hold, and for how long: the time a
// request body may take (BodyDeadline). The request and response size
// limits themselves are applied where the bodies are read.

// BodyDeadline gives each request with a body d from its arrival to send
// all of it (limits.body_timeout). A body that is late fails its Read
// with os.ErrDeadlineExceeded; the gateway answers 408 and the server
// closes the connection. The deadline is lifted as soon as the body has
// ended: the response — a stream may last many minutes — is not bound by
// it, and neither is the server's background read that notices a client
// leaving mid-response (a read deadline left in place would cancel the
// request when it passed). No write deadline is ever set. A request the
// handler does not read whole (404, 413) keeps the deadline, which also
// bounds what the server reads of it afterwards. A request without a body
// gets no deadline. On HTTP/2 the deadline is the stream's own.
func BodyDeadline(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := *http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the body deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	rc     http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
