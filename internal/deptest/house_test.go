package deptest_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// The rules in this file span the whole module (STYLE §1, §9).

// TestPackageDocs: every package says what it is for, in a doc comment.
func TestPackageDocs(t *testing.T) {
	for _, p := range deptest.List(t, "", deptest.Module+"/...") {
		if p.Doc == "" {
			t.Errorf("%s has no package doc comment (STYLE §9: what it is for, its invariants, who may import it)", p.Rel())
		}
	}
}

// TestImportersLines: a package doc's "Importers:" paragraph names, by
// their paths in the module (internal/engine, cmd/airlock-host), exactly
// the packages that import it outside tests; "tests only" names none. So
// the line cannot drift from the import graph.
func TestImportersLines(t *testing.T) {
	pkgs := deptest.List(t, "", deptest.Module+"/...")
	checked := 0
	for _, p := range pkgs {
		doc, err := packageDoc(p.Dir)
		if err != nil {
			t.Fatalf("%s: %v", p.Rel(), err)
		}
		named, ok, err := importersLine(doc)
		if err != nil {
			t.Errorf("%s: %v", p.Rel(), err)
			continue
		}
		if !ok {
			continue
		}
		checked++
		var importers []string
		for _, by := range deptest.Importers(pkgs, p.ImportPath) {
			importers = append(importers, deptest.Rel(by))
		}
		if !slices.Equal(named, importers) {
			t.Errorf("%s: its doc says Importers: %s; the import graph says %s", p.Rel(), list(named), list(importers))
		}
	}
	if checked == 0 {
		t.Fatal("no package has an Importers line: the parser is broken")
	}
}

func list(names []string) string {
	if len(names) == 0 {
		return "tests only"
	}
	return strings.Join(names, ", ")
}

// modulePath matches a package named by its path in the module.
var modulePath = regexp.MustCompile(`\b(?:internal|cmd|bench)/[a-z0-9_/-]*[a-z0-9]`)

// importersLine finds the "Importers:" paragraph of a package doc and
// returns the packages it names, sorted; ok is false when there is none.
func importersLine(doc string) (names []string, ok bool, err error) {
	_, rest, found := strings.Cut(doc, "Importers:")
	if !found {
		return nil, false, nil
	}
	para, _, _ := strings.Cut(rest, "\n\n")
	para = strings.Join(strings.Fields(para), " ")
	names = modulePath.FindAllString(para, -1)
	if len(names) == 0 && !strings.Contains(para, "tests only") {
		return nil, true, &lineError{para}
	}
	slices.Sort(names)
	return slices.Compact(names), true, nil
}

type lineError struct{ para string }

func (e *lineError) Error() string {
	return "its Importers line names no package by path (internal/x, cmd/x) and does not say \"tests only\": " + e.para
}

// packageDoc returns the doc comments of the package's clauses in dir.
func packageDoc(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	var doc strings.Builder
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		f, err := parser.ParseFile(fset, name, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", err
		}
		if f.Doc != nil {
			doc.WriteString(f.Doc.Text())
			doc.WriteString("\n")
		}
	}
	return doc.String(), nil
}

func TestImportersLine(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want []string
		ok   bool
		bad  bool
	}{
		{doc: "Package x does y.\n", ok: false},
		{doc: "Package x.\n\nImporters: internal/engine, internal/host and\ncmd/airlock-host.\n\nMore.", want: []string{"cmd/airlock-host", "internal/engine", "internal/host"}, ok: true},
		{doc: "Importers: tests only.\n", want: nil, ok: true},
		{doc: "Importers: the engine and host wiring.\n", ok: true, bad: true},
		{doc: "Importers: internal/store/sqlite, internal/store/sqlite (twice).\n", want: []string{"internal/store/sqlite"}, ok: true},
	} {
		got, ok, err := importersLine(tt.doc)
		if ok != tt.ok || (err != nil) != tt.bad || (!tt.bad && !slices.Equal(got, tt.want)) {
			t.Errorf("importersLine(%q) = %q, %t, %v; want %q, %t, bad %t", tt.doc, got, ok, err, tt.want, tt.ok, tt.bad)
		}
	}
}
