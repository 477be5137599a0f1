package clickhouse

import (
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestCapturesConformance(t *testing.T) {
	storetest.RunCaptures(t, func(t *testing.T) storetest.CaptureStore { return openTest(t) })
}
