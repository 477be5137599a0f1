package clickhouse

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a ClickHouse server version, as SELECT version() prints it
// ("18.16.1", "23.8.16.40").
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseVersion reads the leading major.minor[.patch] of s; build numbers
// and suffixes after it are ignored.
func ParseVersion(s string) (Version, error) {
	parts := strings.SplitN(strings.TrimSpace(s), ".", 4)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("parse ClickHouse version %q: want major.minor[.patch]", s)
	}
	var nums [3]int
	for i := 0; i < 3 && i < len(parts); i++ {
		p := parts[i]
		if i == 2 {
			// "1-stable" and the like: keep the digits.
			p = p[:len(p)-len(strings.TrimLeft(p, "0123456789"))]
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("parse ClickHouse version %q: bad number %q", s, parts[i])
		}
		nums[i] = n
	}
	return Version{nums[0], nums[1], nums[2]}, nil
}

// Features are what the store uses only where the server has it. The
// oldest server supported is Debian bookworm's 18.16; everything the
// record-level store needs (MergeTree with PARTITION BY and ORDER BY,
// ReplacingMergeTree, Nullable, RowBinary over HTTP) is there already.
type Features struct {
	// LowCardinality(String) for dimension columns (model, biz line, ...):
	// experimental behind a setting in 18.x, on by default from 19.x;
	// used from 20.1, where it is plain and stable.
	LowCardinality bool
	// TTL on tables (from 19.6). Not used yet: Prune deletes by mutations,
	// which work from 18.16 on; dropping old day partitions (every
	// version) or TTL is the next step for large tables.
	TTL bool
	// AsyncInsert (from 21.11). Not used: the store.Writer batches
	// already, so each replica sends one INSERT per batch.
	AsyncInsert bool
}

// FeaturesOf returns what v supports.
func FeaturesOf(v Version) Features {
	return Features{
		LowCardinality: v.AtLeast(20, 1),
		TTL:            v.AtLeast(19, 6),
		AsyncInsert:    v.AtLeast(21, 11),
	}
}
