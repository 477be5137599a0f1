package redisquota

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	startRedis = redistest.Start
	waitFor    = redistest.WaitFor
)
