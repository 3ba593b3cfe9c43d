// Package sqlrow reads the rows of the run store's tables into the store's
// types, once for both SQL stores: the columns each query of a table
// selects, in order, and a scanner for each table that takes a row of
// either driver (a *sql.Row or *sql.Rows of SQLite's database/sql, a
// pgx.Row or pgx.Rows of PostgreSQL's pgx). It also writes the one query
// whose shape depends on its arguments, ListRuns's, in either dialect.
//
// The tables are package schema's: times are INTEGER nanoseconds since
// 1970 in UTC, hashes BLOBs of event.Hash's size or NULL for none, and a
// NULL column reads as its field's zero value.
//
// Importers: internal/store/sqlite and internal/store/postgres.
package sqlrow

import (
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// Scanner is one row of a query's result.
type Scanner interface {
	Scan(dest ...any) error
}

// FromNS is the time of a column of nanoseconds since 1970, in UTC.
func FromNS(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// CopyHash sets h from a hash column b: the zero hash when b is empty
// (NULL), an error when b is not a hash's size.
func CopyHash(h *event.Hash, b []byte) error {
	if len(b) == 0 {
		*h = event.Hash{}
		return nil
	}
	if len(b) != len(h) {
		return fmt.Errorf("%d bytes, want %d", len(b), len(h))
	}
	copy(h[:], b)
	return nil
}

// ScanString reads a row of one text column.
func ScanString(sc Scanner) (string, error) {
	var v string
	err := sc.Scan(&v)
	return v, err
}

// RunColumns are the columns of runs ScanRun reads, in its order.
const RunColumns = `id, tenant, task, model, policy, policy_hash, status, created_ns, updated_ns, finished_ns, parent_run_id, parent_seq, last_seq, last_hash, lease_owner, lease_token, lease_expires_ns, kind`

// ScanRun reads a row of RunColumns.
func ScanRun(sc Scanner) (store.Run, error) {
	// One variable for every destination, so a row costs one allocation
	// for them, not one each.
	var c struct {
		r                 store.Run
		status            string
		created, updated  int64
		finished, expires sql.NullInt64
		parent, owner     sql.NullString
		kind              sql.NullString
		pseq              sql.NullInt64
		lastHash          []byte
	}
	r := &c.r
	if err := sc.Scan(&r.ID, &r.Tenant, &r.Task, &r.Model, &r.Policy, &r.PolicyHash, &c.status,
		&c.created, &c.updated, &c.finished, &c.parent, &c.pseq, &r.LastSeq, &c.lastHash,
		&c.owner, &r.LeaseToken, &c.expires, &c.kind); err != nil {
		return c.r, err
	}
	r.Kind = c.kind.String
	r.LeaseOwner = c.owner.String
	if c.owner.Valid && c.expires.Valid {
		r.LeaseExpires = FromNS(c.expires.Int64)
	}
	r.Status = event.Status(c.status)
	r.Created = FromNS(c.created)
	r.Updated = FromNS(c.updated)
	if c.finished.Valid {
		r.Finished = FromNS(c.finished.Int64)
	}
	r.ParentRunID = c.parent.String
	r.ParentSeq = c.pseq.Int64
	if r.Policy == nil {
		r.Policy = []byte{}
	}
	if err := CopyHash(&r.LastHash, c.lastHash); err != nil {
		return c.r, fmt.Errorf("run %s: last_hash: %w", r.ID, err)
	}
	return c.r, nil
}

// EventColumns are the columns of events ScanEvent reads, in its order.
const EventColumns = `run_id, seq, type, time_ns, payload, prev_hash, hash`

// ScanEvent reads a row of EventColumns.
func ScanEvent(sc Scanner) (event.Event, error) {
	var c struct { // one allocation, as in ScanRun
		e          event.Event
		typ        string
		ns         int64
		prev, hash []byte
	}
	e := &c.e
	if err := sc.Scan(&e.RunID, &e.Seq, &c.typ, &c.ns, (*[]byte)(&e.Payload), &c.prev, &c.hash); err != nil {
		return c.e, err
	}
	e.Type = event.Type(c.typ)
	e.Time = FromNS(c.ns)
	if err := CopyHash(&e.PrevHash, c.prev); err != nil {
		return c.e, fmt.Errorf("seq %d: prev_hash: %w", e.Seq, err)
	}
	if err := CopyHash(&e.Hash, c.hash); err != nil {
		return c.e, fmt.Errorf("seq %d: hash: %w", e.Seq, err)
	}
	return c.e, nil
}

// ArtifactColumns are the columns of artifacts ScanArtifact reads, in its
// order.
const ArtifactColumns = `run_id, name, digest, size, media_type, created_ns`

// ScanArtifact reads a row of ArtifactColumns.
func ScanArtifact(sc Scanner) (store.Artifact, error) {
	var c struct { // one allocation, as in ScanRun
		a  store.Artifact
		ns int64
	}
	a := &c.a
	if err := sc.Scan(&a.RunID, &a.Name, &a.Digest, &a.Size, &a.MediaType, &c.ns); err != nil {
		return c.a, err
	}
	a.Created = FromNS(c.ns)
	return c.a, nil
}

// PolicyMeta are the columns of a policy version but its document, which
// listings leave out (ScanPolicyMeta reads them); PolicyColumns are all of
// them (ScanPolicy).
const (
	PolicyMeta    = `tenant, name, version, hash, policy_hash, source, created_by, created_ns`
	PolicyColumns = PolicyMeta + `, document`
)

// ScanPolicy reads a row of PolicyColumns.
func ScanPolicy(sc Scanner) (store.PolicyVersion, error) { return scanPolicy(sc, true) }

// ScanPolicyMeta reads a row of PolicyMeta: the version's Document is nil.
func ScanPolicyMeta(sc Scanner) (store.PolicyVersion, error) { return scanPolicy(sc, false) }

func scanPolicy(sc Scanner, withDoc bool) (store.PolicyVersion, error) {
	var c struct { // one allocation, as in ScanRun
		v          store.PolicyVersion
		ns         int64
		policyHash sql.NullString // NULL before migration 10
	}
	v := &c.v
	dest := []any{&v.Tenant, &v.Name, &v.Version, &v.Hash, &c.policyHash, &v.Source, &v.By, &c.ns, &v.Document}
	if !withDoc {
		dest = dest[:len(dest)-1]
	}
	if err := sc.Scan(dest...); err != nil {
		return c.v, err
	}
	if withDoc && v.Document == nil {
		v.Document = []byte{}
	}
	v.PolicyHash = c.policyHash.String
	v.CreatedAt = FromNS(c.ns)
	return c.v, nil
}

// TemplateMeta are the columns of a template version but its document
// (ScanTemplateMeta); TemplateColumns all of them (ScanTemplate).
const (
	TemplateMeta    = `tenant, name, version, hash, image, source, created_by, created_ns`
	TemplateColumns = TemplateMeta + `, document`
)

// ScanTemplate reads a row of TemplateColumns.
func ScanTemplate(sc Scanner) (store.TemplateVersion, error) { return scanTemplate(sc, true) }

// ScanTemplateMeta reads a row of TemplateMeta: Document is nil.
func ScanTemplateMeta(sc Scanner) (store.TemplateVersion, error) { return scanTemplate(sc, false) }

func scanTemplate(sc Scanner, withDoc bool) (store.TemplateVersion, error) {
	var c struct { // one allocation, as in ScanRun
		v  store.TemplateVersion
		ns int64
	}
	v := &c.v
	dest := []any{&v.Tenant, &v.Name, &v.Version, &v.Hash, &v.Image, &v.Source, &v.By, &c.ns, &v.Document}
	if !withDoc {
		dest = dest[:len(dest)-1]
	}
	if err := sc.Scan(dest...); err != nil {
		return c.v, err
	}
	if withDoc && v.Document == nil {
		v.Document = []byte{}
	}
	v.CreatedAt = FromNS(c.ns)
	return c.v, nil
}

// LedgerColumns are the columns of ledger ScanLedger reads, in its order.
const LedgerColumns = `id, tenant, kind, amount, run_id, seq, note, created_ns`

// ScanLedger reads a row of LedgerColumns.
func ScanLedger(sc Scanner) (store.LedgerEntry, error) {
	var c struct { // one allocation, as in ScanRun
		e     store.LedgerEntry
		runID sql.NullString
		seq   sql.NullInt64
		ns    int64
	}
	e := &c.e
	if err := sc.Scan(&e.ID, &e.Tenant, &e.Kind, &e.Amount, &c.runID, &c.seq, &e.Note, &c.ns); err != nil {
		return c.e, err
	}
	e.RunID, e.Seq, e.Created = c.runID.String, c.seq.Int64, FromNS(c.ns)
	return c.e, nil
}

// TenantColumns are the columns of tenants ScanTenant reads, in its order.
const TenantColumns = `name, created_ns, deleting_ns`

// ScanTenant reads a row of TenantColumns.
func ScanTenant(sc Scanner) (store.Tenant, error) {
	var c struct { // one allocation, as in ScanRun
		tn       store.Tenant
		ns       int64
		deleting sql.NullInt64
	}
	if err := sc.Scan(&c.tn.Name, &c.ns, &c.deleting); err != nil {
		return c.tn, err
	}
	c.tn.CreatedAt = FromNS(c.ns)
	if c.deleting.Valid {
		c.tn.Deleting = FromNS(c.deleting.Int64)
	}
	return c.tn, nil
}

// APIKeyColumns are the columns of api_keys ScanAPIKey reads, in its
// order.
const APIKeyColumns = `id, tenant, name, scopes, hash, created_ns, last_used_ns, revoked_ns`

// APIKeyRead is what reads of api_keys select for ScanAPIKey:
// APIKeyColumns and, from the key's tenant, when its deletion began
// (NULL while it is not being deleted).
const APIKeyRead = APIKeyColumns + `, (SELECT t.deleting_ns FROM tenants t WHERE t.name = api_keys.tenant)`

// ScanAPIKey reads a row of APIKeyRead.
func ScanAPIKey(sc Scanner) (store.APIKey, error) {
	var c struct { // one allocation, as in ScanRun
		k                           store.APIKey
		scopes                      string
		created                     int64
		lastUsed, revoked, deleting sql.NullInt64
	}
	k := &c.k
	if err := sc.Scan(&k.ID, &k.Tenant, &k.Name, &c.scopes, &k.Hash, &c.created, &c.lastUsed, &c.revoked, &c.deleting); err != nil {
		return c.k, err
	}
	if c.deleting.Valid {
		k.TenantDeleting = FromNS(c.deleting.Int64)
	}
	k.Scopes = store.SplitScopes(c.scopes)
	k.CreatedAt = FromNS(c.created)
	if c.lastUsed.Valid {
		k.LastUsedAt = FromNS(c.lastUsed.Int64)
	}
	if c.revoked.Valid {
		k.RevokedAt = FromNS(c.revoked.Int64)
	}
	return c.k, nil
}

// ListRuns returns the query of store.Store.ListRuns(f) in dialect d, and
// its arguments, or the error of store.ValidateFilter(f).
func ListRuns(f store.RunFilter, d schema.Dialect) (string, []any, error) {
	f, err := store.ValidateFilter(f)
	if err != nil {
		return "", nil, err
	}
	var (
		q    strings.Builder
		args []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return d.Param(len(args))
	}
	q.WriteString(`SELECT ` + RunColumns + ` FROM runs WHERE 1 = 1`)
	if f.Tenant != "" {
		q.WriteString(` AND tenant = ` + arg(f.Tenant))
	}
	switch f.Kind {
	case store.KindAgent:
		q.WriteString(` AND kind IS NULL`)
	case store.KindAny:
	default:
		q.WriteString(` AND kind = ` + arg(f.Kind))
	}
	for i, st := range f.Statuses {
		if i == 0 {
			q.WriteString(` AND status IN (`)
		} else {
			q.WriteString(`, `)
		}
		q.WriteString(arg(string(st)))
		if i == len(f.Statuses)-1 {
			q.WriteString(`)`)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		q.WriteString(` AND EXISTS (SELECT 1 FROM run_metadata m WHERE m.run_id = runs.id AND m.key = ` + arg(k) + ` AND m.value = ` + arg(f.Metadata[k]) + `)`)
	}
	switch {
	case f.After != "" && f.Desc:
		q.WriteString(` AND id < ` + arg(f.After))
	case f.After != "":
		q.WriteString(` AND id > ` + arg(f.After))
	}
	q.WriteString(` ORDER BY id`)
	if f.Desc {
		q.WriteString(` DESC`)
	}
	q.WriteString(` LIMIT ` + arg(f.Limit))
	return q.String(), args, nil
}
