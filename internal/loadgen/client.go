package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Response is what a sender observed for one request: when it really left,
// what came back, and every event of the stream with its arrival time.
type Response struct {
	Sent      time.Time
	Status    int
	RequestID string // the X-Tollgate-Request-Id response header (else X-Request-Id)
	Events    []Event
	// Err is set when the request failed: a transport error, a non-2xx
	// status (with the start of the body), a stream cut before [DONE].
	Err error
	// ErrKind classifies Err for the summary: "status_<code>", "connect",
	// "timeout", "stream_error", "truncated", "canceled".
	ErrKind string
}

// SendFunc sends one request and reads its whole answer. The driver calls
// it from many goroutines.
type SendFunc func(ctx context.Context, r *Request) Response

// Client sends requests over HTTP and reads the stream line by line,
// time-stamping each event as it is read: plain net/http, so nothing
// between the socket and the clock buffers or re-times chunks.
type Client struct {
	BaseURL string // …/v1
	Header  http.Header
	HTTP    *http.Client
}

// NewClient returns a client whose transport keeps at least conns idle
// connections to the host, so a run of that concurrency reuses them
// instead of dialling (and measuring dials) mid-run.
func NewClient(baseURL string, header http.Header, conns int, timeout time.Duration) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = max(conns, 100)
	tr.MaxIdleConnsPerHost = max(conns, 2)
	tr.IdleConnTimeout = 5 * time.Minute
	tr.DisableCompression = true // a gzip layer would batch events
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Header: header, HTTP: &http.Client{Transport: tr, Timeout: timeout}}
}

// CloseIdle closes the transport's idle connections.
func (c *Client) CloseIdle() { c.HTTP.CloseIdleConnections() }

// Send is a SendFunc.
func (c *Client) Send(ctx context.Context, r *Request) Response {
	var resp Response
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		resp.Err, resp.ErrKind = err, "request"
		return resp
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp.Sent = time.Now()
	hr, err := c.HTTP.Do(req)
	if err != nil {
		resp.Err, resp.ErrKind = err, transportKind(err)
		return resp
	}
	defer func() {
		// Read to the end of the body (the chunked terminator after
		// [DONE]) so the connection goes back to the pool: closing it
		// unread would make the next request dial, and measure the dial.
		_, _ = io.Copy(io.Discard, io.LimitReader(hr.Body, 256<<10))
		hr.Body.Close()
	}()
	resp.Status = hr.StatusCode
	// tollgate's own id (the ledger's key); X-Request-Id for a gateway
	// that sets only that.
	resp.RequestID = hr.Header.Get("X-Tollgate-Request-Id")
	if resp.RequestID == "" {
		resp.RequestID = hr.Header.Get("X-Request-Id")
	}
	if hr.StatusCode < 200 || hr.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(hr.Body, 512))
		resp.Err = fmt.Errorf("HTTP %d: %s", hr.StatusCode, bytes.TrimSpace(b))
		resp.ErrKind = fmt.Sprintf("status_%d", hr.StatusCode)
		return resp
	}
	resp.Events, resp.Err = readEvents(hr.Body, time.Now)
	switch {
	case resp.Err != nil:
		resp.ErrKind = transportKind(resp.Err)
		if errors.Is(resp.Err, io.ErrUnexpectedEOF) {
			resp.ErrKind = "truncated"
		}
	case len(resp.Events) == 0 || resp.Events[len(resp.Events)-1].Kind != KindDone:
		resp.Err, resp.ErrKind = errors.New("stream ended without [DONE]"), "truncated"
	}
	for _, e := range resp.Events {
		if e.Kind == KindError && resp.Err == nil {
			resp.Err, resp.ErrKind = errors.New("error event in the stream"), "stream_error"
		}
	}
	return resp
}

func transportKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return "connect"
	}
	return "transport"
}

// readEvents reads server-sent events line by line, stamping each data
// line with now() as soon as it is read. It stops after [DONE] or at EOF.
func readEvents(body io.Reader, now func() time.Time) ([]Event, error) {
	br := bufio.NewReaderSize(body, 32<<10)
	var events []Event
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long event: gather the rest of the line.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 {
			at := now()
			if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); ok {
				e := Event{At: at}
				classify(bytes.TrimSpace(data), &e)
				events = append(events, e)
				if e.Kind == KindDone {
					return events, nil
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return events, nil
			}
			return events, err
		}
	}
}
