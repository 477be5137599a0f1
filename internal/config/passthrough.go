package config

import (
	"fmt"
	"strings"
)

// Passthrough is how the gateway treats requests under /v1/ that it does
// not meter as inference (audio, images, moderations, batches, files, …):
// relayed to an upstream, recorded, never invisible (see
// internal/gateway/passthrough.go and docs/api.md).
//
//	passthrough:
//	  disabled: false                # true: answer them 404 (still recorded)
//	  deny: [/v1/organization/]      # path prefixes answered 403 (the default: admin APIs)
//	  upstreams:                     # path prefix → upstream, when the body names no served model
//	    /v1/audio/: whisper
//	  max_upload_bytes: 536870912    # bodies streamed through (multipart uploads), default 512 MiB
type Passthrough struct {
	Disabled       bool              `yaml:"disabled"`
	Deny           []string          `yaml:"deny"`
	Upstreams      map[string]string `yaml:"upstreams"`
	MaxUploadBytes int64             `yaml:"max_upload_bytes"`
}

// DefaultPassthrough denies OpenAI's organization admin APIs (keys,
// users, projects, usage and costs): a proxy key must never reach them
// with the upstream's own credentials.
func DefaultPassthrough() Passthrough {
	return Passthrough{Deny: []string{"/v1/organization/"}, MaxUploadBytes: 512 << 20}
}

// validatePrefix checks one path prefix of the pass-through config.
func validatePrefix(p string) error {
	switch {
	case !strings.HasPrefix(p, "/v1/"):
		return fmt.Errorf("must be a path prefix under /v1/ such as /v1/organization/; got %q", p)
	case strings.Contains(p, "..") || strings.ContainsAny(p, " \t?#%*"):
		return fmt.Errorf("must be a plain path prefix (no .., spaces, ?, #, %% or *); got %q", p)
	}
	return nil
}

func (p Passthrough) validate(ups []Upstream) []error {
	var errs []error
	for i, d := range p.Deny {
		if err := validatePrefix(d); err != nil {
			errs = append(errs, fmt.Errorf("passthrough.deny[%d]: %w", i, err))
		}
	}
	names := map[string]bool{}
	for _, u := range ups {
		names[u.Name] = true
	}
	for _, k := range sortedKeys(p.Upstreams) {
		if err := validatePrefix(k); err != nil {
			errs = append(errs, fmt.Errorf("passthrough.upstreams.%s: %w", k, err))
		} else if u := p.Upstreams[k]; !names[u] {
			errs = append(errs, fmt.Errorf("passthrough.upstreams.%s: no upstream named %q", k, u))
		}
	}
	if p.MaxUploadBytes < 1 {
		errs = append(errs, fmt.Errorf("passthrough.max_upload_bytes: must be positive (default 536870912, 512 MiB); got %d", p.MaxUploadBytes))
	}
	return errs
}
