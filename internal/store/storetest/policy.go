package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// Policy documents the tests store. Their bytes are what counts: the store
// does not parse them.
var (
	docA = []byte("# v1\nsandbox:\n  limits:\n    memory: 2G\n")
	docB = []byte("# v2\nsandbox:\n  limits:\n    memory: 3G\n")
	// twinA and twinB are different documents whose hashes share their
	// first 8 hex digits (08b03d84), the shortest prefix GetPolicy takes.
	twinA = []byte("# prefix twin 79661\n")
	twinB = []byte("# prefix twin 95113\n")
)

func putPolicy(t *testing.T, s store.Store, v store.PolicyVersion, wantCreated bool) store.PolicyVersion {
	t.Helper()
	got, created, err := s.PutPolicy(context.Background(), v)
	if err != nil || created != wantCreated {
		t.Fatalf("PutPolicy(%s/%s, %q) = %v, %v, want created %v", v.Tenant, v.Name, clipDoc(v.Document), created, err, wantCreated)
	}
	return got
}

func clipDoc(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// samePolicy compares versions; withDoc also compares documents (listings
// leave them out).
func samePolicy(a, b store.PolicyVersion, withDoc bool) bool {
	return a.Tenant == b.Tenant && a.Name == b.Name && a.Version == b.Version && a.Hash == b.Hash && a.PolicyHash == b.PolicyHash &&
		a.Source == b.Source && a.By == b.By && a.CreatedAt.Equal(b.CreatedAt) &&
		(!withDoc || bytes.Equal(a.Document, b.Document))
}

// meta is v as listings return it: without its document.
func meta(vs ...store.PolicyVersion) []store.PolicyVersion {
	out := make([]store.PolicyVersion, len(vs))
	for i, v := range vs {
		v.Document = nil
		out[i] = v
	}
	return out
}

func wantVersions(t *testing.T, s store.Store, tenant, name string, want []store.PolicyVersion) {
	t.Helper()
	got, err := s.PolicyVersions(context.Background(), tenant, name)
	if err != nil || len(got) != len(want) {
		t.Fatalf("PolicyVersions(%s, %s) = %d versions, %v, want %d", tenant, name, len(got), err, len(want))
	}
	for i := range got {
		if got[i].Document != nil || !samePolicy(got[i], want[i], false) {
			t.Fatalf("PolicyVersions(%s, %s)[%d] = %+v, want %+v without its document", tenant, name, i, got[i], meta(want[i])[0])
		}
	}
}

func wantPolicies(t *testing.T, s store.Store, tenant string, want []store.PolicyVersion) {
	t.Helper()
	got, err := s.ListPolicies(context.Background(), tenant)
	if err != nil || len(got) != len(want) {
		t.Fatalf("ListPolicies(%s) = %+v, %v, want %d policies", tenant, got, err, len(want))
	}
	for i := range got {
		if got[i].Document != nil || !samePolicy(got[i], want[i], false) {
			t.Fatalf("ListPolicies(%s)[%d] = %+v, want %+v without its document", tenant, i, got[i], meta(want[i])[0])
		}
	}
}

// testPolicies: versions are numbered per tenant and name, an unchanged
// document is not stored twice, and every version reads back by number,
// by hash prefix or as the latest.
func testPolicies(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	wantPolicies(t, s, "acme", nil)

	v1 := putPolicy(t, s, store.PolicyVersion{
		Tenant: "acme", Name: "prod", Document: docA, Source: "prod.yaml", By: "alice (uid 1000)",
		CreatedAt: base,
	}, true) // CreatedAt is the store's to set
	if v1.Version != 1 || v1.Hash != store.DocumentHash(docA) || !bytes.Equal(v1.Document, docA) || v1.Source != "prod.yaml" ||
		v1.By != "alice (uid 1000)" || !v1.CreatedAt.Equal(clock.Now()) || v1.CreatedAt.Location() != time.UTC {
		t.Fatalf("PutPolicy() = %+v; want version 1, hash %s, CreatedAt %v", v1, store.DocumentHash(docA), clock.Now())
	}
	if !strings.HasPrefix(v1.Hash, "sha256:") || len(v1.Hash) != len("sha256:")+64 {
		t.Fatalf("PutPolicy() hash = %q, want sha256: and 64 hex digits", v1.Hash)
	}

	// The same document again, later, from elsewhere: the stored version,
	// unchanged. A hash given by the caller must be the document's.
	clock.Advance(time.Minute)
	for _, again := range []store.PolicyVersion{
		{Tenant: "acme", Name: "prod", Document: docA, Source: "elsewhere.yaml", By: "bob"},
		{Tenant: "acme", Name: "prod", Document: slices.Clone(docA), Hash: v1.Hash},
	} {
		if got := putPolicy(t, s, again, false); !samePolicy(got, v1, true) {
			t.Fatalf("PutPolicy(same document) = %+v, want the stored %+v", got, v1)
		}
	}

	v2 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: docB, Hash: store.DocumentHash(docB), Source: "prod.yaml"}, true)
	clock.Advance(time.Minute)
	// Going back to an earlier document is a change too: a new version.
	v3 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: docA, Source: "rollback"}, true)
	if v2.Version != 2 || v3.Version != 3 || v3.Hash != v1.Hash || !v2.CreatedAt.Equal(base.Add(time.Hour+time.Minute)) || !v3.CreatedAt.After(v2.CreatedAt) {
		t.Fatalf("PutPolicy() = %+v, %+v; want versions 2 and 3, v3 with v1's hash", v2, v3)
	}
	wantVersions(t, s, "acme", "prod", []store.PolicyVersion{v3, v2, v1})

	// Other names and tenants count their own versions.
	staging := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "staging", Document: docB}, true)
	theirs := putPolicy(t, s, store.PolicyVersion{Tenant: "globex", Name: "prod", Document: docB}, true)
	if staging.Version != 1 || theirs.Version != 1 {
		t.Fatalf("first versions of other names = %d, %d, want 1", staging.Version, theirs.Version)
	}
	a0 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "0", Document: docB}, true)
	wantPolicies(t, s, "acme", []store.PolicyVersion{a0, v3, staging})
	wantPolicies(t, s, "globex", []store.PolicyVersion{theirs})
	wantPolicies(t, s, "initech", nil)
	wantVersions(t, s, "globex", "prod", []store.PolicyVersion{theirs})

	hexA, hexB := strings.TrimPrefix(v1.Hash, "sha256:"), strings.TrimPrefix(v2.Hash, "sha256:")
	for _, tt := range []struct {
		ref  string
		want store.PolicyVersion
	}{
		{"", v3},
		{"v1", v1},
		{"v2", v2},
		{"v3", v3},
		{"v01", v1},
		{v2.Hash, v2},
		{hexB, v2},
		{hexB[:8], v2},
		{"sha256:" + hexB[:8], v2},
		{strings.ToUpper(hexB[:12]), v2},
		{v1.Hash, v3}, // the newest version with the hash
		{hexA[:8], v3},
	} {
		got, err := s.GetPolicy(ctx, "acme", "prod", tt.ref)
		if err != nil || !samePolicy(got, tt.want, true) {
			t.Fatalf("GetPolicy(acme, prod, %q) = %+v, %v, want %+v", tt.ref, got, err, tt.want)
		}
	}
	if got, err := s.GetPolicy(ctx, "globex", "prod", ""); err != nil || !samePolicy(got, theirs, true) {
		t.Fatalf("GetPolicy(globex, prod) = %+v, %v, want %+v", got, err, theirs)
	}

	for _, tt := range []struct{ tenant, name, ref string }{
		{"acme", "nope", ""},
		{"acme", "prod", "v4"},
		{"acme", "prod", "v9223372036854775807"},
		{"acme", "prod", "00000000"},
		{"acme", "prod", strings.Repeat("0", 64)},
		{"acme", "staging", "v2"},
		{"acme", "staging", hexA[:8]}, // another name's hash
		{"initech", "prod", ""},       // another tenant's name
		{"initech", "prod", hexA},
	} {
		_, err := s.GetPolicy(ctx, tt.tenant, tt.name, tt.ref)
		wantErr(t, fmt.Sprintf("GetPolicy(%s, %s, %q)", tt.tenant, tt.name, tt.ref), err, store.ErrNotFound)
	}
	for _, tt := range []struct{ tenant, name string }{{"acme", "nope"}, {"initech", "prod"}} {
		_, err := s.PolicyVersions(ctx, tt.tenant, tt.name)
		wantErr(t, fmt.Sprintf("PolicyVersions(%s, %s)", tt.tenant, tt.name), err, store.ErrNotFound)
	}
}

// testPolicyHash: a version keeps the policy hash its caller gave (the
// store does not parse documents), listings show it, and a version is
// found by a prefix of it as by one of its document's hash; documents that
// differ in bytes and share a policy hash are versions of their own whose
// shared hash is no ambiguity. A version stored without one gets it from
// a later put of its document.
func testPolicyHash(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	canon, other := "sha256:"+strings.Repeat("c0", 32), "sha256:"+strings.Repeat("d1", 32)
	v1 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: docA, PolicyHash: canon}, true)
	if v1.PolicyHash != canon || v1.Hash != store.DocumentHash(docA) {
		t.Fatalf("PutPolicy() = %+v, want policy hash %s and the document's hash", v1, canon)
	}
	// The same policy written differently: a new version, one policy hash.
	reformatted := append([]byte("# reformatted\n"), docA...)
	v2 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: reformatted, PolicyHash: canon}, true)
	v3 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: docB, PolicyHash: other}, true)
	wantVersions(t, s, "acme", "prod", []store.PolicyVersion{v3, v2, v1})
	wantPolicies(t, s, "acme", []store.PolicyVersion{v3})
	for _, tt := range []struct {
		ref  string
		want store.PolicyVersion
	}{
		{canon[len("sha256:"):][:8], v2}, // the newest with the policy hash
		{canon, v2},
		{other[:len("sha256:")+10], v3},
		{v1.Hash, v1}, // by the document's hash, as before
		{strings.TrimPrefix(v2.Hash, "sha256:")[:12], v2},
	} {
		got, err := s.GetPolicy(ctx, "acme", "prod", tt.ref)
		if err != nil || !samePolicy(got, tt.want, true) {
			t.Fatalf("GetPolicy(acme, prod, %q) = %+v, %v, want %+v", tt.ref, got, err, tt.want)
		}
	}
	// Stored without a policy hash (as before the stores kept them), then
	// put again with one: the same version, which now has it.
	old := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "old", Document: docB}, true)
	if old.PolicyHash != "" {
		t.Fatalf("PutPolicy(no policy hash) = %+v, want none", old)
	}
	if got, err := s.GetPolicy(ctx, "acme", "old", ""); err != nil || got.PolicyHash != "" {
		t.Fatalf("GetPolicy(old) = %+v, %v, want no policy hash", got, err)
	}
	again := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "old", Document: docB, PolicyHash: other}, false)
	old.PolicyHash = other
	if !samePolicy(again, old, true) {
		t.Fatalf("PutPolicy(again, with a policy hash) = %+v, want %+v", again, old)
	}
	wantVersions(t, s, "acme", "old", []store.PolicyVersion{old})
	if got, err := s.GetPolicy(ctx, "acme", "old", other[:len("sha256:")+8]); err != nil || !samePolicy(got, old, true) {
		t.Fatalf("GetPolicy(old, policy hash prefix) = %+v, %v, want %+v", got, err, old)
	}
}

// testPolicyAmbiguous: a hash prefix that two different hashes share is
// refused; versions that share one hash do not make it ambiguous.
func testPolicyAmbiguous(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	a := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "twins", Document: twinA}, true)
	b := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "twins", Document: twinB}, true)
	a2 := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "twins", Document: twinA}, true)
	if a.Hash[:len("sha256:")+8] != b.Hash[:len("sha256:")+8] {
		t.Fatalf("the twins' hashes %s and %s do not share 8 hex digits", a.Hash, b.Hash)
	}
	prefix := a.Hash[len("sha256:") : len("sha256:")+8]
	_, err := s.GetPolicy(ctx, "acme", "twins", prefix)
	wantErr(t, "GetPolicy(shared prefix)", err, store.ErrInvalid)
	if !strings.Contains(err.Error(), "more than one") {
		t.Fatalf("GetPolicy(shared prefix) = %v, want it to say the prefix matches more than one hash", err)
	}
	for _, tt := range []struct {
		ref  string
		want store.PolicyVersion
	}{
		{a.Hash[:len("sha256:")+20], a2},
		{b.Hash[:len("sha256:")+20], b},
	} {
		got, err := s.GetPolicy(ctx, "acme", "twins", tt.ref)
		if err != nil || !samePolicy(got, tt.want, true) {
			t.Fatalf("GetPolicy(%q) = %+v, %v, want %+v", tt.ref, got, err, tt.want)
		}
	}
	// The prefix is unique within another name holding only one twin.
	solo := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "solo", Document: twinB}, true)
	if got, err := s.GetPolicy(ctx, "acme", "solo", prefix); err != nil || !samePolicy(got, solo, true) {
		t.Fatalf("GetPolicy(solo, %s) = %+v, %v, want %+v", prefix, got, err, solo)
	}
}

// testPolicyInvalid: each malformed put or read is refused with
// ErrInvalid, and nothing is written.
func testPolicyInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	good := store.PolicyVersion{Tenant: "acme", Name: "prod", Document: docA, Source: "prod.yaml", By: "alice"}
	with := func(edit func(*store.PolicyVersion)) store.PolicyVersion {
		v := good
		edit(&v)
		return v
	}
	tests := []struct {
		name string
		msg  string // the error says this
		v    store.PolicyVersion
	}{
		{"no name", "policy name", with(func(v *store.PolicyVersion) { v.Name = "" })},
		{"name too long", "policy name", with(func(v *store.PolicyVersion) { v.Name = strings.Repeat("a", store.MaxPolicyNameLen+1) })},
		{"upper case", "policy name", with(func(v *store.PolicyVersion) { v.Name = "Prod" })},
		{"leading dot", "policy name", with(func(v *store.PolicyVersion) { v.Name = ".prod" })},
		{"leading dash", "policy name", with(func(v *store.PolicyVersion) { v.Name = "-prod" })},
		{"leading underscore", "policy name", with(func(v *store.PolicyVersion) { v.Name = "_prod" })},
		{"slash", "policy name", with(func(v *store.PolicyVersion) { v.Name = "a/b" })},
		{"space", "policy name", with(func(v *store.PolicyVersion) { v.Name = "my policy" })},
		{"at", "policy name", with(func(v *store.PolicyVersion) { v.Name = "prod@v1" })},
		{"not ASCII", "policy name", with(func(v *store.PolicyVersion) { v.Name = "pröd" })},
		{"NUL", "policy name", with(func(v *store.PolicyVersion) { v.Name = "a\x00" })},
		{"no tenant", "tenant", with(func(v *store.PolicyVersion) { v.Tenant = "" })},
		{"malformed tenant", "tenant", with(func(v *store.PolicyVersion) { v.Tenant = "acme corp" })},
		{"version set", "assigns", with(func(v *store.PolicyVersion) { v.Version = 4 })},
		{"empty document", "empty", with(func(v *store.PolicyVersion) { v.Document = nil })},
		{"document too large", "limit", with(func(v *store.PolicyVersion) { v.Document = bytes.Repeat([]byte("#"), store.MaxPolicyLen+1) })},
		{"another document's hash", "is not the document's", with(func(v *store.PolicyVersion) { v.Hash = store.DocumentHash(docB) })},
		{"malformed hash", "is not the document's", with(func(v *store.PolicyVersion) { v.Hash = "md5:00" })},
		{"hash in upper case", "is not the document's", with(func(v *store.PolicyVersion) { v.Hash = strings.ToUpper(store.DocumentHash(docA)) })},
		{"malformed policy hash", "policy hash", with(func(v *store.PolicyVersion) { v.PolicyHash = "md5:00" })},
		{"policy hash in upper case", "policy hash", with(func(v *store.PolicyVersion) { v.PolicyHash = "sha256:" + strings.Repeat("AB", 32) })},
		{"short policy hash", "policy hash", with(func(v *store.PolicyVersion) { v.PolicyHash = "sha256:abcd" })},
		{"source with newline", "source", with(func(v *store.PolicyVersion) { v.Source = "a\nb" })},
		{"source too long", "source", with(func(v *store.PolicyVersion) { v.Source = strings.Repeat("s", store.MaxNoteLen+1) })},
		{"by with escape", "by", with(func(v *store.PolicyVersion) { v.By = "a\x1b[2Jb" })},
		{"by too long", "by", with(func(v *store.PolicyVersion) { v.By = strings.Repeat("b", store.MaxNameLen+1) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, created, err := s.PutPolicy(ctx, tt.v)
			wantErr(t, "PutPolicy("+tt.name+")", err, store.ErrInvalid)
			if created || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("PutPolicy(%s) = %v, %v, want it to say %q", tt.name, created, err, tt.msg)
			}
		})
	}
	wantPolicies(t, s, "acme", nil)

	// The edges of what is valid.
	for _, name := range []string{"0", "a", strings.Repeat("z", store.MaxPolicyNameLen), "a.b_c-d", "9lives", "prod.yaml"} {
		v := good
		v.Name = name
		putPolicy(t, s, v, true)
	}
	v := good
	v.Document = bytes.Repeat([]byte("#"), store.MaxPolicyLen)
	v.Source, v.By = "", ""
	putPolicy(t, s, v, true)

	for _, tt := range []struct{ tenant, name, ref string }{
		{"", "prod", ""},
		{"a b", "prod", ""},
		{"acme", "", ""},
		{"acme", "Prod", ""},
		{"acme", "prod@v1", ""},
		{"acme", "prod", "v0"},
		{"acme", "prod", "v-1"},
		{"acme", "prod", "v+1"},
		{"acme", "prod", "v"},
		{"acme", "prod", "vx"},
		{"acme", "prod", "v1.5"},
		{"acme", "prod", "v99999999999999999999"},
		{"acme", "prod", "1234567"}, // 7 hex digits: too short
		{"acme", "prod", "sha256:1234567"},
		{"acme", "prod", "sha256:"},
		{"acme", "prod", "zzzzzzzz"},
		{"acme", "prod", "0123456789abcdef%"},
		{"acme", "prod", "01234567_"},
		{"acme", "prod", strings.Repeat("0", 65)},
		{"acme", "prod", "latest"},
		{"acme", "prod", "md5:01234567"},
	} {
		_, err := s.GetPolicy(ctx, tt.tenant, tt.name, tt.ref)
		wantErr(t, fmt.Sprintf("GetPolicy(%q, %q, %q)", tt.tenant, tt.name, tt.ref), err, store.ErrInvalid)
		if tt.ref == "" {
			_, err = s.PolicyVersions(ctx, tt.tenant, tt.name)
			wantErr(t, fmt.Sprintf("PolicyVersions(%q, %q)", tt.tenant, tt.name), err, store.ErrInvalid)
		}
	}
	_, err := s.ListPolicies(ctx, "a b")
	wantErr(t, "ListPolicies(a b)", err, store.ErrInvalid)
}

// testPolicyRace: concurrent puts of one name, through one handle and
// (when the factory can) another, as other processes would: different
// documents get versions 1..n once each, and one document raced by several
// writers is stored once.
func testPolicyRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	handles := []store.Store{s}
	if f.Reopen != nil {
		handles = append(handles, reopen(t, f, s))
	}
	const n = 12
	var (
		wg                 sync.WaitGroup
		distinct, same     = make([]store.PolicyVersion, n), make([]store.PolicyVersion, n)
		createdD, createdS = make([]bool, n), make([]bool, n)
		errs               = make([]error, 2*n)
	)
	for i := range n {
		h := handles[i%len(handles)]
		wg.Go(func() {
			distinct[i], createdD[i], errs[i] = h.PutPolicy(context.Background(),
				store.PolicyVersion{Tenant: "acme", Name: "busy", Document: fmt.Appendf(nil, "# writer %d\n", i)})
		})
		wg.Go(func() {
			same[i], createdS[i], errs[n+i] = h.PutPolicy(context.Background(),
				store.PolicyVersion{Tenant: "acme", Name: "shared", Document: docA})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var versions []int64
	for i, v := range distinct {
		if !createdD[i] {
			t.Fatalf("PutPolicy(writer %d) was not created", i)
		}
		versions = append(versions, v.Version)
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("concurrent versions = %v, want 1..%d once each", versions, n)
		}
	}
	if got := slices.Index(createdS, true); got < 0 || slices.Index(createdS[got+1:], true) >= 0 {
		t.Fatalf("PutPolicy(same document) created = %v, want exactly one", createdS)
	}
	for _, v := range same {
		if !samePolicy(v, same[0], true) || v.Version != 1 {
			t.Fatalf("PutPolicy(same document) = %+v and %+v, want one version 1", v, same[0])
		}
	}
	for _, h := range handles {
		got, err := h.PolicyVersions(context.Background(), "acme", "busy")
		if err != nil || len(got) != n || got[0].Version != n || got[n-1].Version != 1 {
			t.Fatalf("PolicyVersions(busy) = %d versions, %v, want %d newest first", len(got), err, n)
		}
	}
}

// testPolicyRedaction: Source and By are redacted; the document is kept
// byte for byte, since its hash names it.
func testPolicyRedaction(t *testing.T, f Factory) {
	s := open(t, f, redactor{Secret})
	doc := []byte("# keep me exactly: " + Secret + "\n")
	v := putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "p", Document: doc, Source: "/tmp/" + Secret + ".yaml", By: Secret}, true)
	if v.Source != "/tmp/[redacted].yaml" || v.By != "[redacted]" || !bytes.Equal(v.Document, doc) || v.Hash != store.DocumentHash(doc) {
		t.Fatalf("PutPolicy() = %+v, want Source and By redacted, the document and its hash kept", v)
	}
	got, err := s.GetPolicy(context.Background(), "acme", "p", "")
	if err != nil || !samePolicy(got, v, true) {
		t.Fatalf("GetPolicy() = %+v, %v, want %+v", got, err, v)
	}
	wantVersions(t, s, "acme", "p", []store.PolicyVersion{v})
}
