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

// Template documents the tests store; the store does not parse them.
var (
	tmplA  = []byte("image: python:3\npool: 1\n")
	tmplB  = []byte("image: python:3\npool: 2\n")
	imageA = "index.docker.io/library/python@sha256:" + strings.Repeat("a", 64)
	imageB = "index.docker.io/library/python@sha256:" + strings.Repeat("b", 64)
)

func putTemplate(t *testing.T, s store.Store, v store.TemplateVersion, wantCreated bool) store.TemplateVersion {
	t.Helper()
	got, created, err := s.PutTemplate(context.Background(), v)
	if err != nil || created != wantCreated {
		t.Fatalf("PutTemplate(%s/%s, %q) = %v, %v, want created %v", v.Tenant, v.Name, clipDoc(v.Document), created, err, wantCreated)
	}
	return got
}

func sameTemplate(a, b store.TemplateVersion, withDoc bool) bool {
	return a.Tenant == b.Tenant && a.Name == b.Name && a.Version == b.Version && a.Hash == b.Hash && a.Image == b.Image &&
		a.Source == b.Source && a.By == b.By && a.CreatedAt.Equal(b.CreatedAt) &&
		(!withDoc || bytes.Equal(a.Document, b.Document))
}

func wantTemplateList(t *testing.T, what string, got []store.TemplateVersion, err error, want []store.TemplateVersion) {
	t.Helper()
	if err != nil || len(got) != len(want) {
		t.Fatalf("%s = %d versions, %v, want %d", what, len(got), err, len(want))
	}
	for i := range got {
		if got[i].Document != nil || !sameTemplate(got[i], want[i], false) {
			t.Fatalf("%s[%d] = %+v, want %+v without its document", what, i, got[i], want[i])
		}
	}
}

// testTemplates: versions are numbered per tenant and name, an unchanged
// document and image is not stored again, reads by version and latest,
// listings without documents, tenants apart, and removal of every version.
func testTemplates(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	got, err := s.ListTemplates(ctx, "acme")
	wantTemplateList(t, "ListTemplates(acme)", got, err, nil)

	v1 := putTemplate(t, s, store.TemplateVersion{
		Tenant: "acme", Name: "py", Image: imageA, Document: tmplA, Source: "py.yaml", By: "alice",
		CreatedAt: base,
	}, true)
	if v1.Version != 1 || v1.Hash != store.DocumentHash(tmplA) || v1.Image != imageA || !v1.CreatedAt.Equal(clock.Now()) ||
		v1.CreatedAt.Location() != time.UTC || v1.Source != "py.yaml" || v1.By != "alice" {
		t.Fatalf("PutTemplate() = %+v, want version 1 of the document at %v", v1, clock.Now())
	}
	clock.Advance(time.Minute)
	if again := putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageA, Document: slices.Clone(tmplA)}, false); !sameTemplate(again, v1, true) {
		t.Fatalf("PutTemplate(same document and image) = %+v, want the stored %+v", again, v1)
	}
	// The same document with its tag resolved to another digest is a new
	// version: the image is part of what a version is.
	v2 := putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageB, Document: tmplA}, true)
	clock.Advance(time.Minute)
	v3 := putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageB, Document: tmplB, Hash: store.DocumentHash(tmplB)}, true)
	if v2.Version != 2 || v3.Version != 3 {
		t.Fatalf("versions = %d, %d, want 2, 3", v2.Version, v3.Version)
	}
	other := putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "node", Image: imageA, Document: tmplB}, true)
	putTemplate(t, s, store.TemplateVersion{Tenant: "globex", Name: "py", Image: imageA, Document: tmplB}, true)

	for _, tc := range []struct {
		version int64
		want    store.TemplateVersion
	}{{0, v3}, {1, v1}, {2, v2}, {3, v3}} {
		got, err := s.GetTemplate(ctx, "acme", "py", tc.version)
		if err != nil || !sameTemplate(got, tc.want, true) {
			t.Fatalf("GetTemplate(acme, py, %d) = %+v, %v, want %+v", tc.version, got, err, tc.want)
		}
	}
	vs, err := s.TemplateVersions(ctx, "acme", "py")
	wantTemplateList(t, "TemplateVersions(acme, py)", vs, err, []store.TemplateVersion{v3, v2, v1})
	got, err = s.ListTemplates(ctx, "acme")
	wantTemplateList(t, "ListTemplates(acme)", got, err, []store.TemplateVersion{other, v3})

	for what, err := range map[string]error{
		"GetTemplate(acme, py, 4)":     second(s.GetTemplate(ctx, "acme", "py", 4)),
		"GetTemplate(acme, none, 0)":   second(s.GetTemplate(ctx, "acme", "none", 0)),
		"GetTemplate(initech, py, 0)":  second(s.GetTemplate(ctx, "initech", "py", 0)),
		"TemplateVersions(acme, none)": second(s.TemplateVersions(ctx, "acme", "none")),
		"DeleteTemplate(acme, none)":   second(s.DeleteTemplate(ctx, "acme", "none")),
	} {
		wantErr(t, what, err, store.ErrNotFound)
	}

	// Removal takes every version of the name, and only of the tenant's.
	if n, err := s.DeleteTemplate(ctx, "acme", "py"); err != nil || n != 3 {
		t.Fatalf("DeleteTemplate(acme, py) = %d, %v, want 3", n, err)
	}
	wantErr(t, "GetTemplate(acme, py) after delete", second(s.GetTemplate(ctx, "acme", "py", 0)), store.ErrNotFound)
	got, err = s.ListTemplates(ctx, "acme")
	wantTemplateList(t, "ListTemplates(acme) after delete", got, err, []store.TemplateVersion{other})
	if g, err := s.GetTemplate(ctx, "globex", "py", 0); err != nil || g.Version != 1 {
		t.Fatalf("GetTemplate(globex, py) after acme's delete = %+v, %v, want its version 1", g, err)
	}
	// The name starts again at 1.
	if again := putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageA, Document: tmplA}, true); again.Version != 1 {
		t.Fatalf("PutTemplate after delete = version %d, want 1", again.Version)
	}
}

func second[T any](_ T, err error) error { return err }

func testTemplateInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	ok := store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageA, Document: tmplA}
	for what, v := range map[string]store.TemplateVersion{
		"bad tenant":   {Tenant: "a b", Name: "py", Image: imageA, Document: tmplA},
		"bad name":     {Tenant: "acme", Name: "Py", Image: imageA, Document: tmplA},
		"empty":        {Tenant: "acme", Name: "py", Image: imageA},
		"too large":    {Tenant: "acme", Name: "py", Image: imageA, Document: make([]byte, store.MaxTemplateLen+1)},
		"wrong hash":   {Tenant: "acme", Name: "py", Image: imageA, Document: tmplA, Hash: store.DocumentHash(tmplB)},
		"no image":     {Tenant: "acme", Name: "py", Document: tmplA},
		"image line":   {Tenant: "acme", Name: "py", Image: "a\nb", Document: tmplA},
		"version set":  {Tenant: "acme", Name: "py", Image: imageA, Document: tmplA, Version: 3},
		"source":       {Tenant: "acme", Name: "py", Image: imageA, Document: tmplA, Source: "a\x00b"},
		"by too long":  {Tenant: "acme", Name: "py", Image: imageA, Document: tmplA, By: strings.Repeat("x", store.MaxNameLen+1)},
		"name too lon": {Tenant: "acme", Name: strings.Repeat("p", store.MaxPolicyNameLen+1), Image: imageA, Document: tmplA},
	} {
		_, _, err := s.PutTemplate(ctx, v)
		wantErr(t, "PutTemplate("+what+")", err, store.ErrInvalid)
	}
	putTemplate(t, s, ok, true)
	wantErr(t, "GetTemplate(-1)", second(s.GetTemplate(ctx, "acme", "py", -1)), store.ErrInvalid)
	wantErr(t, "GetTemplate(bad name)", second(s.GetTemplate(ctx, "acme", "../py", 0)), store.ErrInvalid)
	wantErr(t, "TemplateVersions(bad tenant)", second(s.TemplateVersions(ctx, "a b", "py")), store.ErrInvalid)
	wantErr(t, "ListTemplates(bad tenant)", second(s.ListTemplates(ctx, "a b")), store.ErrInvalid)
	wantErr(t, "DeleteTemplate(bad name)", second(s.DeleteTemplate(ctx, "acme", "")), store.ErrInvalid)
}

// testTemplateRace: concurrent puts of one name through one handle and
// (when the factory can) another get versions 1..n once each.
func testTemplateRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	handles := []store.Store{s}
	if f.Reopen != nil {
		handles = append(handles, reopen(t, f, s))
	}
	const n = 12
	var wg sync.WaitGroup
	got := make([]store.TemplateVersion, n)
	errs := make([]error, n)
	for i := range n {
		h := handles[i%len(handles)]
		wg.Go(func() {
			got[i], _, errs[i] = h.PutTemplate(context.Background(),
				store.TemplateVersion{Tenant: "acme", Name: "busy", Image: imageA, Document: fmt.Appendf(nil, "image: w%d\n", i)})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var versions []int64
	for _, v := range got {
		versions = append(versions, v.Version)
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("concurrent versions = %v, want 1..%d once each", versions, n)
		}
	}
}

// testTemplateRedaction: Source and By are redacted, the document kept.
func testTemplateRedaction(t *testing.T, f Factory) {
	s := open(t, f, redactor{Secret})
	doc := []byte("image: a\nenv:\n  K: " + Secret + "\n")
	v := putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "p", Image: imageA, Document: doc, Source: Secret + ".yaml", By: Secret}, true)
	if v.Source != "[redacted].yaml" || v.By != "[redacted]" || !bytes.Equal(v.Document, doc) {
		t.Fatalf("PutTemplate() = %+v, want Source and By redacted, the document kept", v)
	}
}
