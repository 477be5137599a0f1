package record

// Error types of the requests the gateway answers itself outside the
// inference endpoints (see the list beside ErrNone; the set stays closed).
const (
	ErrUnknownURL = "unknown_url" // a path no route serves: 404
	ErrPathDenied = "path_denied" // a path passthrough.deny refuses: 403
)
