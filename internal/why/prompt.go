package why

import "time"

// PromptChange is a template whose system prompt changed: its
// fingerprint (a hash of the system prompt alone, never its text) and
// token length before and after, when the new one was first seen, and
// who sent it.
type PromptChange struct {
	Template          string    `json:"template"`
	At                time.Time `json:"at"`
	TokensBefore      int64     `json:"tokens_before"`
	TokensAfter       int64     `json:"tokens_after"`
	FingerprintBefore string    `json:"fingerprint_before"`
	FingerprintAfter  string    `json:"fingerprint_after"`
	Key               string    `json:"key,omitempty"`
	User              string    `json:"user,omitempty"`
	Requests          int       `json:"requests"`
}
