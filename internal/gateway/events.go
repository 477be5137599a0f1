package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// streamEvents is the SSE tap for the agent APIs (Responses, Messages):
// streamResponse's twin for typed events. Each event goes to the client
// as it arrives, byte for byte — error events included, already in the
// API's own shape — while p reads the same bytes: the first event with
// output of any kind is the first token (docs/metrics.md lists them), each
// output event a point of the timeline, and the answer's usage, status and
// tool calls come from p.Answer() when the stream ends, however it ends.
// The protocol's last event (response.completed/incomplete/failed,
// message_stop) is held back until the Record is durable, as chat's
// [DONE] is.
func (ex *exchange) streamEvents(ctx context.Context, rec *record.Record, resp *http.Response, wd *watchdog, p eventParser) {
	w := ex.w
	copyHeaders(w.Header(), resp.Header)
	if ex.rate != nil {
		ex.rate.Write(w.Header())
	}
	w.Header().Set("Server-Timing", serverTiming(rec, false))
	w.WriteHeader(resp.StatusCode)
	rec.Status = resp.StatusCode
	rc := http.NewResponseController(w)
	clientGone := rc.Flush() != nil

	er := usage.NewEventReader(resp.Body, maxEventBytes)
	var (
		tl        timeline
		text      eventText // kept only while a tokenizer may count it
		upErr     error
		engErr    string
		cwAtLast  time.Duration
		doneEvent []byte
		final     bool // the answer's last word came (message_delta, response.completed)
	)
	for !clientGone {
		ev, err := er.Next()
		if err != nil {
			upErr = err
			break
		}
		if ev.Data != nil {
			se, perr := p.Parse(ev.Data)
			if perr != nil {
				upErr = errMalformed
				break
			}
			if se.Error != "" {
				engErr = se.Error
			}
			final = final || se.Final
			if se.Done {
				// Held back until the Record is durable (see complete).
				doneEvent = append(doneEvent[:0], ev.Raw...)
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // let the connection be reused
				break
			}
			if se.Output != usage.NoOutput {
				if tl.written == 0 {
					rec.Marks.FirstUpstreamToken = ex.since()
					rec.FirstChunkBytes = se.Content
					wd.firstToken()
				}
				if ex.capBuf != nil {
					ex.capBuf.chunk(ev.Data)
				}
				if ex.counting {
					text.add(ev.Data)
				}
				rec.ContentBytes += int64(se.Content)
				tl.written++
				rec.Marks.LastUpstreamToken = ex.since()
				cwAtLast = rec.ClientWrite
			}
		}
		wd.progress()
		w0 := ex.since()
		n, werr := w.Write(ev.Raw)
		rec.ResponseBytes += int64(n)
		if werr != nil {
			clientGone = true
			break
		}
		if !er.EventBuffered() {
			if rc.Flush() != nil {
				clientGone = true
				break
			}
			at := ex.since()
			rec.ClientWrite += at - w0
			tl.flushed(rec, at)
		} else {
			rec.ClientWrite += ex.since() - w0
		}
	}
	if !clientGone && rc.Flush() == nil {
		tl.flushed(rec, ex.since())
	}
	tl.close(rec)
	rec.ContentChunks = tl.written
	rec.ClientWriteTail = rec.ClientWrite - cwAtLast
	a := p.Answer()
	applyAnswer(rec, a, tl.written)
	if rec.Usage.Source == record.SourceChunks {
		// No usage came (a Responses stream reports it only on its last
		// event): the model's tokenizer counts the prompt and what was
		// streamed as the Record is finished, as for chat (countUsage).
		ex.uncounted, ex.text = ex.counting, string(text.b)
	}

	switch {
	case clientGone && ex.shutDown():
		ex.record(rec, http.StatusServiceUnavailable, record.ErrShutdown, "the gateway shut down before the stream ended")
	case clientGone:
		ex.record(rec, record.StatusClientClosed, record.ErrClientDisconnect, "client closed the connection mid-stream")
		rec.ClientDisconnect = true
	case engErr != "":
		// The engine's error event (or a failed response) went to the
		// client as it came; the last event too, now.
		ex.record(rec, http.StatusBadGateway, record.ErrUpstreamStatus, "the engine sent an error event: "+boundedPrefix(engErr, 64))
		if len(doneEvent) > 0 {
			n, _ := w.Write(doneEvent)
			rec.ResponseBytes += int64(n)
			_ = rc.Flush()
		}
	case (doneEvent != nil || final) && (upErr == nil || errors.Is(upErr, io.EOF)):
		// Whole: the terminal event came, or the stream ended cleanly
		// after the answer's last word (an engine that sends no
		// message_stop), as chat's without [DONE].
		ex.record(rec, resp.StatusCode, record.ErrNone, "")
		ex.complete(rec, doneEvent)
	default:
		if upErr == nil || errors.Is(upErr, io.EOF) {
			upErr = errEndedEarly
		}
		status, typ := ex.classify(ctx, upErr)
		if status == record.StatusClientClosed {
			rec.ClientDisconnect = true
			ex.record(rec, status, typ, "client closed the connection mid-stream")
			break
		}
		msg := upstreamMessage(typ, rec.Upstream)
		ex.record(rec, status, typ, msg)
		// Tell the client the answer is incomplete rather than ending as if
		// it were whole: the SDKs raise an error event.
		n, _ := w.Write(agentStreamError(rec.Endpoint, &apiError{Kind: typ, Status: status, Type: "server_error", Code: typ, Message: msg}))
		rec.ResponseBytes += int64(n)
		_ = rc.Flush()
	}
}
