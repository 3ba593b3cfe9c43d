package sqlrow_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// TestListRunsParams: in either dialect, the query has one placeholder per
// argument, PostgreSQL's numbered in order, whatever the filter sets. (The
// conformance suite checks what the queries select, and that a malformed
// filter is refused.)
func TestListRunsParams(t *testing.T) {
	pgParam := regexp.MustCompile(`\$[0-9]+`)
	after := event.NewRunID(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, f := range []store.RunFilter{
		{},
		{Kind: store.KindAgent, Limit: 10},
		{Kind: store.KindAny, Limit: 1, Desc: true},
		{
			Tenant: "acme", Kind: store.KindSandbox, Statuses: []event.Status{event.StatusQueued, event.StatusRunning},
			Metadata: map[string]string{"b": "2", "a": "1"}, After: after, Limit: 5,
		},
		{Tenant: "acme", Kind: store.KindAgent, Statuses: []event.Status{event.StatusPaused}, After: after, Desc: true, Limit: 5},
	} {
		lite, liteArgs, err := sqlrow.ListRuns(f, schema.SQLite)
		if err != nil {
			t.Fatalf("ListRuns(%+v, SQLite) = %v", f, err)
		}
		pg, pgArgs, err := sqlrow.ListRuns(f, schema.Postgres)
		if err != nil {
			t.Fatalf("ListRuns(%+v, Postgres) = %v", f, err)
		}
		if fmt.Sprint(liteArgs) != fmt.Sprint(pgArgs) {
			t.Errorf("ListRuns(%+v) arguments: SQLite %v, PostgreSQL %v", f, liteArgs, pgArgs)
		}
		if n := strings.Count(lite, "?"); n != len(liteArgs) {
			t.Errorf("ListRuns(%+v, SQLite) = %q with %d placeholders, %d arguments", f, lite, n, len(liteArgs))
		}
		var want []string
		for i := range pgArgs {
			want = append(want, fmt.Sprintf("$%d", i+1))
		}
		if got := pgParam.FindAllString(pg, -1); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("ListRuns(%+v, Postgres) = %q, placeholders %v, want %v", f, pg, got, want)
		}
		if pgParam.ReplaceAllString(pg, "?") != lite {
			t.Errorf("ListRuns(%+v): PostgreSQL's query %q is not SQLite's %q", f, pg, lite)
		}
	}
}
