package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// TestFieldsMatchTheMigrations: store.Fields, typed by sqlType, describe
// the requests table the migrations build, column for column — so a
// ledger migrated by any tollgate reads and writes with the table, and a
// column added by addColumns is the one an old-style migration added.
func TestFieldsMatchTheMigrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	openAt(t, path).Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('requests')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var (
			name, typ   string
			notnull, pk int
			dflt        sql.NullString
		)
		if err := rows.Scan(&name, &typ, &notnull, &dflt, &pk); err != nil {
			t.Fatal(err)
		}
		switch {
		case pk == 1:
			typ += " PRIMARY KEY" // request_id: its own declaration
		case notnull == 1:
			typ += " NOT NULL DEFAULT " + dflt.String
		}
		have[name] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, f := range store.Fields {
		want := sqlType(f.Kind)
		if f.Name == "request_id" {
			want = "TEXT PRIMARY KEY"
		}
		got, ok := have[f.Name]
		switch {
		case !ok:
			t.Errorf("field %s: no column in the migrated ledger (a migration entry addColumns(%q) is missing)", f.Name, f.Name)
		case got != want:
			t.Errorf("field %s: the migrations made it %q, the field table says %q", f.Name, got, want)
		}
		delete(have, f.Name)
	}
	for name, typ := range have {
		t.Errorf("column %s (%s) of the ledger is in no row of store.Fields", name, typ)
	}

	// Migration 15 was written out by hand; addColumns writes the same.
	got := strings.Fields(addColumns("cache_write_tokens", "cache_write_1h_tokens", "tool_calls"))
	if want := strings.Fields(migrations[14]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("addColumns = %q\nmigration 15 = %q", got, want)
	}
}
