package schema

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"testing"
)

// released pins the SHA-256 of every migration that has shipped, in each
// dialect. Databases in the field were built by exactly these statements:
// change the schema by appending a migration (and its hashes here), never
// by editing one or the PostgreSQL translation.
var released = []struct{ sqlite, postgres string }{
	{
		"ae85299a85ec185b63a577420e84a2cc66e84db7e05ca4cab3aac7ceaf958d52",
		"618af1d33032399062807b7f4064f4a166dffd9c731bd56ae11afd8c662d9ba3",
	},
	{
		"53b5c3a5319a694aff287db8963b84aae0a3a18f9167af3ce57a1e972e409d16",
		"61382c0bed14558a6cfec39bbc47f76ea120c676de181671f4f7a86e859f943c",
	},
	{ // 3: run leases
		"ccfe6319220a447fcc5155119d57df042ab844d531b12dad6a0935cb9e2dd7f0",
		"ea47f92c8b712d346a0220d6c27b728c7107fa38429ec37b2aa709afa6f68064",
	},
	{ // 4: credit ledger
		"a1b41380d444c3d422c58276888abd3a42bb59dc5242b557162602dab6116fad",
		"4cf274b3990427b0680c3f5ba498b6fb15bad5fccea659b79ff8c7193c8ae38d",
	},
	{ // 5: named policies
		"2a33aa722ab071965549fd10797077072e679e80c100d0388d3e073f592de15f",
		"b134c951ac4da862b1b8a469b15d86231115c30bfd1246aa6c75d62f4edb5a00",
	},
	{ // 6: tenants and API keys
		"3c37e5708dbe7a34e535282ff90b2cda82647e4261a0d9968754b6fe1e100d3b",
		"c4ba36eae1515d63b2821381175a3abca956fbc9f1da7b7b7095a25628fd2170",
	},
	{ // 7: run kinds
		"531189d481756d39aaf64d7ac7fb427eb2f2b36b9ab5d223d391865a515f3414",
		"a89c4da1168708e812b5b8cbb355bdcbf3b694f1835af3e905574422def4d7df",
	},
	{ // 8: blobs in the database
		"5f30cc9348263c5de1d819c8c859997a30f3935a30b54d13d57e425ae47ca078",
		"bb12719a16698035b2cffea0b3f9f49b66029f62466b80a9be12f9398600c3de",
	},
}

func TestReleased(t *testing.T) {
	if Version != len(migrations) {
		t.Fatalf("Version = %d, but there are %d migrations", Version, len(migrations))
	}
	lite, pg := SQLite.Migrations(), Postgres.Migrations()
	if len(lite) != Version || len(pg) != Version {
		t.Fatalf("SQLite.Migrations() has %d migrations, Postgres.Migrations() %d; want %d", len(lite), len(pg), Version)
	}
	for i, want := range released {
		if got := fmt.Sprintf("%x", sha256.Sum256([]byte(lite[i]))); got != want.sqlite {
			t.Errorf("released SQLite migration %d was edited (sha256 %s, released %s); add a new migration instead", i+1, got, want.sqlite)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256([]byte(pg[i]))); got != want.postgres {
			t.Errorf("released PostgreSQL migration %d changed (sha256 %s, released %s); add a new migration instead", i+1, got, want.postgres)
		}
	}
}

// TestPostgresWords: no SQLite-only word survives the translation, and the
// translation touched only SQL words (upper case), never a name.
func TestPostgresWords(t *testing.T) {
	sqliteOnly := regexp.MustCompile(`\b(INTEGER|BLOB|ROWID|AUTOINCREMENT)\b`)
	name := regexp.MustCompile(`\b[a-z_]+\b`)
	for i, m := range Postgres.Migrations() {
		if w := sqliteOnly.FindString(m); w != "" {
			t.Errorf("Postgres.Migrations()[%d] still says %s", i, w)
		}
		if a, b := name.FindAllString(m, -1), name.FindAllString(migrations[i], -1); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("Postgres.Migrations()[%d] names %v, the SQLite migration %v", i, a, b)
		}
	}
}

// TestCopies: callers get their own slices.
func TestCopies(t *testing.T) {
	SQLite.Migrations()[0] = "x"
	Postgres.Migrations()[0] = "x"
	if SQLite.Migrations()[0] == "x" || Postgres.Migrations()[0] == "x" {
		t.Fatal("a caller changed the package's migrations")
	}
}
