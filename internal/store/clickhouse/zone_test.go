package clickhouse

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// The rollup zone is the earliest recorded, for every process: one that
// found none and recorded its own adopts an earlier record of another
// replica's that raced it; and a database without one records
// Config.RollupZone (store.timezone), not the report zone.
func TestRollupZoneEarliestWins(t *testing.T) {
	needServer(t)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	open := func(db string, loc, zone *time.Location) *Store {
		t.Helper()
		s, err := Open(t.Context(), Config{HTTP: serverURL, Database: db, Location: loc, RollupZone: zone}, testLogger(t))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	newDB := func() string {
		db := fmt.Sprintf("tollgate_test_%d_%d", os.Getpid(), dbSeq.Add(1))
		t.Cleanup(func() { _ = adminExec(t.Context(), "DROP DATABASE IF EXISTS "+quoteIdent(db)) })
		return db
	}

	t.Run("race", func(t *testing.T) {
		db := newDB()
		// Another replica (Kolkata) recorded its zone before this one's
		// row, after this one found none.
		testHookZoneRecorded = func(d string) {
			if d != db {
				return
			}
			q := "INSERT INTO " + quoteIdent(db) + "." + rollupState + " (name, num, text, at) VALUES ('zone', 0, 'Asia/Kolkata', 1)"
			if err := adminExec(t.Context(), q); err != nil {
				t.Error(err)
			}
		}
		defer func() { testHookZoneRecorded = nil }()
		s := open(db, time.UTC, nil)
		if s.zone.String() != "Asia/Kolkata" {
			t.Errorf("rollup zone %v, want Asia/Kolkata (the earliest recorded)", s.zone)
		}
		testHookZoneRecorded = nil
		if s2 := open(db, time.UTC, nil); s2.zone.String() != "Asia/Kolkata" {
			t.Errorf("reopened: rollup zone %v, want Asia/Kolkata", s2.zone)
		}
	})

	t.Run("report zone is not the rollup zone", func(t *testing.T) {
		db := newDB()
		s := open(db, kolkata, time.UTC) // report --tz Asia/Kolkata, store.timezone UTC
		if s.zone != time.UTC || s.loc != kolkata {
			t.Errorf("rollup zone %v, report zone %v; want UTC and Asia/Kolkata", s.zone, s.loc)
		}
		if s2 := open(db, kolkata, kolkata); s2.zone.String() != "UTC" {
			t.Errorf("store.timezone changed to Asia/Kolkata: rollup zone %v, want UTC (recorded first)", s2.zone)
		}
	})
}
