package otlp

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// DefaultMaxBodyBytes bounds an export request body, before and after
// decompression. vLLM exports batches of at most 512 small spans.
const DefaultMaxBodyBytes = 8 << 20

// Receiver is an OTLP trace receiver that keeps only engine spans. Serve
// Handler for OTLP/HTTP (conventionally on port 4318) and, for engines
// that export over gRPC — vLLM's default — RegisterGRPC on a grpc.Server
// (port 4317).
type Receiver struct {
	// MaxBodyBytes bounds a request body, compressed and decompressed;
	// set it before serving. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64

	onSpan   func(Span)
	log      *slog.Logger
	llmSpans prometheus.Counter
	other    prometheus.Counter
	requests *prometheus.CounterVec
	now      func() time.Time
}

// NewReceiver returns a receiver that calls onSpan, on the request's
// goroutine, for every llm_request span it decodes; onSpan must not block
// (Joiner.Offer does not). Other spans are counted and dropped. The
// receiver's metrics are registered with reg when it is not nil.
func NewReceiver(onSpan func(Span), log *slog.Logger, reg prometheus.Registerer) *Receiver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if onSpan == nil {
		onSpan = func(Span) {}
	}
	spans := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_otlp_spans_received_total",
		Help: "Spans received by the OTLP receiver, by kind: llm_request (vLLM's request span, kept) or other (dropped).",
	}, []string{"kind"})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_otlp_requests_total",
		Help: "OTLP export requests received, by outcome.",
	}, []string{"status"})
	spans = register(reg, spans, log)
	requests = register(reg, requests, log)
	for _, s := range []string{statusOK, statusBadRequest, statusTooLarge, statusUnsupported, statusNotFound, statusMethod} {
		requests.WithLabelValues(s)
	}
	return &Receiver{
		MaxBodyBytes: DefaultMaxBodyBytes,
		onSpan:       onSpan,
		log:          log,
		llmSpans:     spans.WithLabelValues(VLLMSpanName),
		other:        spans.WithLabelValues("other"),
		requests:     requests,
		now:          time.Now,
	}
}

// register registers c, or returns the collector already registered under
// its name, so that two receivers sharing a registry share their counts.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
		log.Error("register otlp metrics", "err", err)
	default:
		log.Error("register otlp metrics", "err", err)
	}
	return c
}

// Outcomes, the values of tollgate_otlp_requests_total's status label.
const (
	statusOK          = "ok"
	statusBadRequest  = "bad_request"            // undecodable body or content encoding
	statusTooLarge    = "too_large"              // body over MaxBodyBytes
	statusUnsupported = "unsupported_media_type" // content type or encoding not OTLP
	statusNotFound    = "not_found"
	statusMethod      = "method_not_allowed"
)

func statusLabel(code int) string {
	switch code {
	case http.StatusOK:
		return statusOK
	case http.StatusRequestEntityTooLarge:
		return statusTooLarge
	case http.StatusUnsupportedMediaType:
		return statusUnsupported
	case http.StatusNotFound:
		return statusNotFound
	case http.StatusMethodNotAllowed:
		return statusMethod
	}
	return statusBadRequest
}

// Handler serves OTLP/HTTP trace exports: POST /v1/traces, and POST / for
// exporters given the receiver's base URL as their full endpoint (vLLM's
// http/protobuf exporter posts to the URL exactly as configured).
func (r *Receiver) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, resp, err := r.export(w, req)
		status := http.StatusOK
		if err != nil {
			status = err.status
			r.log.Debug("otlp export rejected", "status", status, "err", err.msg, "remote", req.RemoteAddr)
			writeError(w, c, err)
		} else {
			writeResponse(w, c, resp)
		}
		r.requests.WithLabelValues(statusLabel(status)).Inc()
	})
}

// exportError is a rejected request: the status to answer and why.
type exportError struct {
	status int
	msg    string
}

func errorf(status int, format string, args ...any) *exportError {
	return &exportError{status: status, msg: fmt.Sprintf(format, args...)}
}

// codec is one OTLP/HTTP encoding: the request is read and the response
// written in it.
type codec struct {
	contentType string
	traces      ptrace.Unmarshaler
	response    func(ptraceotlp.ExportResponse) ([]byte, error)
	status      func(code int32, msg string) []byte
}

var (
	protoCodec = &codec{
		contentType: "application/x-protobuf",
		traces:      &ptrace.ProtoUnmarshaler{},
		response:    ptraceotlp.ExportResponse.MarshalProto,
		status:      protoStatus,
	}
	jsonCodec = &codec{
		contentType: "application/json",
		traces:      &ptrace.JSONUnmarshaler{},
		response:    ptraceotlp.ExportResponse.MarshalJSON,
		status:      jsonStatus,
	}
)

// export is the request path: check, read, decode, hand the spans over.
// The codec is returned whenever the content type was understood, so that
// errors are written in the client's encoding.
func (r *Receiver) export(w http.ResponseWriter, req *http.Request) (*codec, ptraceotlp.ExportResponse, *exportError) {
	none := ptraceotlp.ExportResponse{}
	if req.URL.Path != "/v1/traces" && req.URL.Path != "/" {
		return nil, none, errorf(http.StatusNotFound, "%s: not found; OTLP traces are posted to /v1/traces", req.URL.Path)
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, none, errorf(http.StatusMethodNotAllowed, "method %s not allowed; use POST", req.Method)
	}
	c, err := requestCodec(req.Header.Get("Content-Type"))
	if err != nil {
		return nil, none, err
	}
	body, err := r.readBody(w, req)
	if err != nil {
		return c, none, err
	}
	td, uerr := c.traces.UnmarshalTraces(body)
	if uerr != nil {
		return c, none, errorf(http.StatusBadRequest, "decode %s ExportTraceServiceRequest: %v", c.contentType, uerr)
	}
	return c, r.consume(td), nil
}

func requestCodec(contentType string) (*codec, *exportError) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type %q: want application/x-protobuf or application/json", contentType)
	}
	switch mt {
	case "application/x-protobuf", "application/protobuf":
		return protoCodec, nil
	case "application/json":
		return jsonCodec, nil
	}
	return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type %q: want application/x-protobuf or application/json", mt)
}

// readBody reads the body within MaxBodyBytes, before and after gzip, so
// that a small compressed body cannot expand without bound.
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) ([]byte, *exportError) {
	limit := r.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	body := http.MaxBytesReader(w, req.Body, limit)
	defer body.Close()
	var src io.Reader = body
	switch enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, readError(err, limit, "gzip")
		}
		defer zr.Close()
		src = zr
	default:
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Encoding %q: want gzip or none", enc)
	}
	b, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		return nil, readError(err, limit, "body")
	}
	if int64(len(b)) > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, "decompressed body exceeds %d bytes", limit)
	}
	return b, nil
}

func readError(err error, limit int64, what string) *exportError {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errorf(http.StatusRequestEntityTooLarge, "body exceeds %d bytes", limit)
	}
	return errorf(http.StatusBadRequest, "read %s: %v", what, err)
}

// consume hands over the llm_request spans of one export and returns its
// response. A span without a trace id cannot be joined and is reported
// back as rejected, as OTLP's partial success allows.
func (r *Receiver) consume(td ptrace.Traces) ptraceotlp.ExportResponse {
	now := r.now()
	var kept, other, rejected int64
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				s := spans.At(k)
				if s.Name() != VLLMSpanName {
					other++
					continue
				}
				if s.TraceID().IsEmpty() {
					rejected++
					continue
				}
				kept++
				r.onSpan(SpanFromVLLM(s, now))
			}
		}
	}
	r.llmSpans.Add(float64(kept + rejected))
	r.other.Add(float64(other))
	resp := ptraceotlp.NewExportResponse()
	if rejected > 0 {
		ps := resp.PartialSuccess()
		ps.SetRejectedSpans(rejected)
		ps.SetErrorMessage(fmt.Sprintf("%d %s span(s) without a trace id", rejected, VLLMSpanName))
	}
	return resp
}

func writeResponse(w http.ResponseWriter, c *codec, resp ptraceotlp.ExportResponse) {
	b, err := c.response(resp)
	if err != nil {
		// Our own empty response; failing to encode it is a bug.
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", c.contentType)
	w.WriteHeader(http.StatusOK)
	w.Write(b) //nolint:errcheck // the exporter left; nothing to do
}

// writeError answers with a google.rpc.Status in the request's encoding,
// as OTLP/HTTP asks, or in plain text when the encoding is unknown.
func writeError(w http.ResponseWriter, c *codec, e *exportError) {
	if c == nil {
		http.Error(w, e.msg, e.status)
		return
	}
	w.Header().Set("Content-Type", c.contentType)
	w.WriteHeader(e.status)
	w.Write(c.status(grpcCode(e.status), e.msg)) //nolint:errcheck
}

// grpcCode maps our statuses to google.rpc.Code.
func grpcCode(status int) int32 {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return 8 // RESOURCE_EXHAUSTED
	case http.StatusNotFound:
		return 5 // NOT_FOUND
	case http.StatusMethodNotAllowed:
		return 12 // UNIMPLEMENTED
	}
	return 3 // INVALID_ARGUMENT
}

// protoStatus encodes google.rpc.Status{code: 1, message: 2} by hand: two
// fields do not justify another generated package.
func protoStatus(code int32, msg string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(code))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, msg)
}

func jsonStatus(code int32, msg string) []byte {
	b, _ := json.Marshal(struct {
		Code    int32  `json:"code"`
		Message string `json:"message"`
	}{code, msg})
	return b
}

// RegisterGRPC serves OTLP/gRPC trace exports (TraceService/Export) on s.
// The server's own limits (grpc.MaxRecvMsgSize, 4 MiB by default) bound
// request sizes there.
func (r *Receiver) RegisterGRPC(s *grpc.Server) {
	ptraceotlp.RegisterGRPCServer(s, &grpcTraces{r: r})
}

type grpcTraces struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receiver
}

// Export is called with a request gRPC has already decoded; malformed ones
// never get here.
func (g *grpcTraces) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	resp := g.r.consume(req.Traces())
	g.r.requests.WithLabelValues(statusOK).Inc()
	return resp, nil
}
