package record

// MeteredEndpoints are the endpoints whose answers carry token usage the
// gateway meters; "" is an older row's (chat or completions, before the
// endpoint was recorded). Only these count as "usage missing" when the
// engine reported none: token counting, stored-response requests and
// pass-through answer without usage by design.
var MeteredEndpoints = []string{"", "chat", "completions", "embeddings", "responses", "messages"}

// MetersTokens says whether endpoint is one of MeteredEndpoints.
func MetersTokens(endpoint string) bool {
	switch endpoint {
	case "", "chat", "completions", "embeddings", "responses", "messages":
		return true
	}
	return false
}
