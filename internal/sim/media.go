package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The media endpoints: the two OpenAI operations outside chat whose
// answers carry token usage, served so the gateway's pass-through can be
// tested against an engine rather than a stub. They do not go through the
// scheduler: there is nothing to decode, only an answer to shape.
//
//   - POST /v1/images/generations (JSON) answers gpt-image-1's shape: one
//     data item per image (n, default 1) and usage with input_tokens (the
//     prompt's tokens) and output_tokens (ImageTokens per image).
//   - POST /v1/audio/transcriptions (multipart/form-data) reads the upload
//     as a stream, never whole, and answers gpt-4o-transcribe's shape:
//     text and usage {type: tokens, input_tokens: one audio token per
//     AudioBytesPerToken bytes of the file, output_tokens: the text's}.
//     The headers X-Sim-File-Bytes and X-Sim-File-SHA256 say what arrived,
//     so a test can check the upload came through whole and unchanged.

// ImageTokens are the output tokens of one generated image (gpt-image-1,
// 1024×1024 at medium quality).
const ImageTokens = 1056

// AudioBytesPerToken is how many bytes of an uploaded audio file make one
// input token of a transcription.
const AudioBytesPerToken = 1024

// MaxUploadBytes bounds one transcription upload.
const MaxUploadBytes = 1 << 30

type imageRequest struct {
	Model  string `json:"model"`
	Prompt string `json:"prompt"`
	N      *int   `json:"n"`
}

type mediaUsage struct {
	Type               string         `json:"type,omitempty"`
	InputTokens        int            `json:"input_tokens"`
	OutputTokens       int            `json:"output_tokens"`
	TotalTokens        int            `json:"total_tokens"`
	InputTokensDetails map[string]int `json:"input_tokens_details,omitempty"` // images
	InputTokenDetails  map[string]int `json:"input_token_details,omitempty"`  // transcriptions: OpenAI spells it so
}

func (e *Engine) images(w http.ResponseWriter, r *http.Request) error {
	var req imageRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	if req.Prompt == "" {
		return errorf(http.StatusBadRequest, "'prompt' is required")
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > 10 {
		return errorf(http.StatusBadRequest, "'n' must be between 1 and 10; got %d", n)
	}
	in := countTokens(req.Prompt)
	data := make([]map[string]string, n)
	for i := range data {
		// A 1×1 transparent PNG: the shape of an answer, not a picture.
		data[i] = map[string]string{"b64_json": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"created": time.Now().Unix(),
		"model":   model,
		"data":    data,
		"usage": mediaUsage{InputTokens: in, OutputTokens: n * ImageTokens, TotalTokens: in + n*ImageTokens,
			InputTokensDetails: map[string]int{"text_tokens": in, "image_tokens": 0}},
	})
	return nil
}

func (e *Engine) transcriptions(w http.ResponseWriter, r *http.Request) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return errorf(http.StatusBadRequest, "want a multipart/form-data body: %v", err)
	}
	var (
		model, name string
		size        int64
		sum         []byte
	)
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errorf(http.StatusBadRequest, "reading the multipart body: %v", err)
		}
		switch {
		case p.FormName() == "file":
			h := sha256.New()
			size, err = io.Copy(h, io.LimitReader(p, MaxUploadBytes+1))
			if err != nil {
				return errorf(http.StatusBadRequest, "reading the file: %v", err)
			}
			if size > MaxUploadBytes {
				return errorf(http.StatusRequestEntityTooLarge, "the file is larger than %d bytes", MaxUploadBytes)
			}
			sum, name = h.Sum(nil), p.FileName()
		case p.FormName() == "model":
			b, err := io.ReadAll(io.LimitReader(p, 256))
			if err != nil {
				return errorf(http.StatusBadRequest, "reading the model field: %v", err)
			}
			model = string(b)
		}
	}
	if sum == nil {
		return errorf(http.StatusBadRequest, "the 'file' field is required")
	}
	if _, err := e.model(model); err != nil {
		return err
	}
	text := fmt.Sprintf("Transcript of %s, %d bytes of audio.", name, size)
	in := int((size + AudioBytesPerToken - 1) / AudioBytesPerToken)
	out := countTokens(text)
	w.Header().Set("X-Sim-File-Bytes", strconv.FormatInt(size, 10))
	w.Header().Set("X-Sim-File-SHA256", hex.EncodeToString(sum))
	writeJSON(w, http.StatusOK, map[string]any{
		"text": text,
		"usage": mediaUsage{Type: "tokens", InputTokens: in, OutputTokens: out, TotalTokens: in + out,
			InputTokenDetails: map[string]int{"text_tokens": 0, "audio_tokens": in}},
	})
	return nil
}
