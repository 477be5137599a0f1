package clickhouse

import (
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	needServer(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openTest(t) })
}
