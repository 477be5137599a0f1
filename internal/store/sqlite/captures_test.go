package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestCapturesConformance(t *testing.T) {
	storetest.RunCaptures(t, func(t *testing.T) storetest.CaptureStore {
		return openAt(t, filepath.Join(t.TempDir(), "captures.db"))
	})
}
