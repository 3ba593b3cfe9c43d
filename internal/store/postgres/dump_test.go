package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// dumpText returns the bytes of every text and bytea column of every row
// of every table of the store's schema: all a reader of the database can
// see. (Dead row versions stay in the heap files until VACUUM, which
// autovacuum runs; SQL cannot read them.)
func dumpText(t *testing.T, c *pgx.Conn) []byte {
	t.Helper()
	ctx := context.Background()
	rows, err := c.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND data_type IN ('text', 'bytea', 'character varying')`)
	if err != nil {
		t.Fatal(err)
	}
	var cols [][3]string
	for rows.Next() {
		var c [3]string
		if err := rows.Scan(&c[0], &c[1], &c[2]); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cols) == 0 {
		t.Fatal("dump: no text or bytea column found")
	}
	var all []byte
	for _, tc := range cols {
		table, col := pgx.Identifier{tc[0]}.Sanitize(), pgx.Identifier{tc[1]}.Sanitize()
		expr := col
		if tc[2] != "bytea" {
			expr = "convert_to(" + col + ", 'UTF8')"
		}
		rows, err := c.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s IS NOT NULL`, expr, table, col))
		if err != nil {
			t.Fatalf("dump %s.%s: %v", tc[0], tc[1], err)
		}
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				t.Fatal(err)
			}
			all = append(append(all, b...), 0)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return all
}
