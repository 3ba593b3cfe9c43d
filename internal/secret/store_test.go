package secret

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
)

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secrets")
	s, err := Open(dir, KeyFile(filepath.Join(dir, "key")))
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// assertNoClearText fails if any file under dir holds value.
func assertNoClearText(t *testing.T, dir string, value []byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, value) {
			t.Errorf("%s holds the clear-text value", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, dir := openTestStore(t)
	tests := []struct {
		tenant, name string
		value        []byte
		hosts        []string
		wantHosts    []string
	}{
		{event.LocalTenant, "GITHUB_TOKEN", []byte("ghp_0123456789abcdef"), []string{"API.github.com.", "*.github.com", "api.github.com"}, []string{"*.github.com", "api.github.com"}},
		{event.LocalTenant, "plain", []byte("value with\nnewline and \x00 nul"), nil, nil},
		{event.LocalTenant, "ip.bound", []byte("tok-ip-bound"), []string{"127.0.0.1", "[::1]"}, []string{"127.0.0.1", "::1"}},
		{"acme", "GITHUB_TOKEN", []byte("ghp_other_tenant_value"), nil, nil},
		{event.LocalTenant, "max", bytes.Repeat([]byte{0xAB}, MaxValueSize), nil, nil},
	}
	for _, tt := range tests {
		if err := s.Set(ctx, tt.tenant, tt.name, NewValue(tt.value), tt.hosts); err != nil {
			t.Fatalf("Set(%s/%s): %v", tt.tenant, tt.name, err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.tenant+"/"+tt.name, func(t *testing.T) {
			v, info, err := s.Get(ctx, tt.tenant, tt.name)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if !bytes.Equal(v.Reveal(), tt.value) {
				t.Errorf("Get(%s/%s) value differs", tt.tenant, tt.name)
			}
			if info.Name != tt.name || !slices.Equal(info.Hosts, tt.wantHosts) || info.Created.IsZero() || info.Updated.Before(info.Created) {
				t.Errorf("Get(%s/%s) info = %+v, want hosts %q", tt.tenant, tt.name, info, tt.wantHosts)
			}
		})
		assertNoClearText(t, dir, tt.value)
	}

	list, err := s.List(ctx, event.LocalTenant)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range list {
		names = append(names, i.Name)
	}
	if want := []string{"GITHUB_TOKEN", "ip.bound", "max", "plain"}; !slices.Equal(names, want) {
		t.Errorf("List(default) = %q, want %q", names, want)
	}
	if l, _ := s.List(ctx, "nobody"); len(l) != 0 {
		t.Errorf("List(nobody) = %v, want empty", l)
	}

	// Overwrite keeps the creation time and replaces the binding.
	_, before, _ := s.Get(ctx, event.LocalTenant, "plain")
	if err := s.Set(ctx, event.LocalTenant, "plain", NewValue([]byte("second-value")), []string{"example.com"}); err != nil {
		t.Fatal(err)
	}
	v, after, err := s.Get(ctx, event.LocalTenant, "plain")
	if err != nil || string(v.Reveal()) != "second-value" || !after.Created.Equal(before.Created) || !slices.Equal(after.Hosts, []string{"example.com"}) {
		t.Errorf("after overwrite: Get = %v %+v %v", string(v.Reveal()), after, err)
	}

	if err := s.Delete(ctx, event.LocalTenant, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, event.LocalTenant, "plain"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, event.LocalTenant, "plain"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx, "acme", "plain"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(acme/plain) = %v, want ErrNotFound", err)
	}
}

func TestStorePermissions(t *testing.T) {
	ctx := context.Background()
	s, dir := openTestStore(t)
	if err := s.Set(ctx, event.LocalTenant, "x", NewValue([]byte("perm-check-value")), nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{".": 0o700 | fs.ModeDir, "key": 0o600, storeFile: 0o600, lockFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("mode of %s = %v, want %v", name, st.Mode(), want)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(open, KeyFile(filepath.Join(open, "key"))); err == nil {
		t.Errorf("Open(world-writable dir) succeeded")
	}
	if _, err := Open(dir, nil); err == nil {
		t.Errorf("Open with nil key source succeeded")
	}
}

func TestKeyFile(t *testing.T) {
	ctx := context.Background()
	raw := bytes.Repeat([]byte{7}, KeySize)
	tests := []struct {
		name    string
		content []byte
		mode    fs.FileMode
		wantErr string
	}{
		{"raw", raw, 0o600, ""},
		{"hex", []byte(fmt.Sprintf("%x\n", raw)), 0o600, ""},
		{"base64", []byte("BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n"), 0o400, ""},
		{"group readable", raw, 0o640, "mode 0640"},
		{"world readable", raw, 0o644, "mode 0644"},
		{"too short", raw[:16], 0o600, "want 32 raw bytes"},
		{"garbage", []byte("not a key at all, not a key at all!!!!!"), 0o600, "want 32 raw bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, tt.content, tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			key, err := KeyFile(path).Key(ctx)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Key() error = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), string(tt.content)) {
					t.Errorf("error shows the key file content: %v", err)
				}
				return
			}
			if err != nil || !bytes.Equal(key, raw) {
				t.Fatalf("Key() = %x, %v, want %x", key, err, raw)
			}
		})
	}

	t.Run("created on first use", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sub", "key")
		k1, err := KeyFile(path).Key(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k2, err := KeyFile(path).Key(ctx)
		if err != nil || !bytes.Equal(k1, k2) || len(k1) != KeySize {
			t.Fatalf("second Key() = %x, %v; first %x", k2, err, k1)
		}
		st, _ := os.Stat(path)
		if st.Mode() != 0o600 {
			t.Errorf("created key mode = %v, want 0600", st.Mode())
		}
	})
	t.Run("symlink refused", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "real"), raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("real", filepath.Join(dir, "key")); err != nil {
			t.Fatal(err)
		}
		if _, err := KeyFile(filepath.Join(dir, "key")).Key(ctx); err == nil {
			t.Errorf("Key() through a symlink succeeded")
		}
	})
	t.Run("store refuses a 0644 key", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "key")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(path, 0o644)
		s, err := Open(filepath.Join(dir, "secrets"), KeyFile(path))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Set(ctx, event.LocalTenant, "x", NewValue([]byte("value-1234")), nil); err == nil || !strings.Contains(err.Error(), "0644") {
			t.Errorf("Set with a 0644 key = %v, want a mode error", err)
		}
	})
}

// fixedKey is a KeySource for tests that need a second key.
type fixedKey []byte

func (k fixedKey) Key(context.Context) ([]byte, error) { return slices.Clone(k), nil }

func TestStoreTamper(t *testing.T) {
	ctx := context.Background()
	const valA, valB = "value-of-secret-A", "value-of-secret-B"
	setup := func(t *testing.T) (*Store, string) {
		s, dir := openTestStore(t)
		for name, v := range map[string]string{"A": valA, "B": valB} {
			if err := s.Set(ctx, event.LocalTenant, name, NewValue([]byte(v)), []string{"a.example"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Set(ctx, "other", "A", NewValue([]byte(valA)), []string{"a.example"}); err != nil {
			t.Fatal(err)
		}
		return s, dir
	}
	edit := func(t *testing.T, dir string, fn func(f *storeData)) {
		t.Helper()
		path := filepath.Join(dir, storeFile)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f storeData
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		fn(&f)
		if b, err = json.Marshal(&f); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	idx := func(f *storeData, tenant, name string) int { return f.find(tenant, name) }

	tests := []struct {
		name    string
		tamper  func(t *testing.T, dir string)
		get     [2]string
		wantErr error
	}{
		{"flip a ciphertext byte", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) { f.Secrets[idx(f, event.LocalTenant, "A")].Ciphertext[3] ^= 1 })
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"flip a tag byte", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) { c := f.Secrets[idx(f, event.LocalTenant, "A")].Ciphertext; c[len(c)-1] ^= 0x80 })
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"flip a nonce byte", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) { f.Secrets[idx(f, event.LocalTenant, "A")].Nonce[0] ^= 1 })
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"swap ciphertexts between names", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) {
				a, b := &f.Secrets[idx(f, event.LocalTenant, "A")], &f.Secrets[idx(f, event.LocalTenant, "B")]
				a.Nonce, b.Nonce = b.Nonce, a.Nonce
				a.Ciphertext, b.Ciphertext = b.Ciphertext, a.Ciphertext
			})
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"rename a record", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) {
				f.Secrets = slices.Delete(f.Secrets, idx(f, event.LocalTenant, "B"), idx(f, event.LocalTenant, "B")+1)
				f.Secrets[idx(f, event.LocalTenant, "A")].Name = "B"
			})
		}, [2]string{event.LocalTenant, "B"}, ErrCorrupt},
		{"move to another tenant", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) {
				o, d := &f.Secrets[idx(f, "other", "A")], &f.Secrets[idx(f, event.LocalTenant, "A")]
				o.Nonce, o.Ciphertext = d.Nonce, d.Ciphertext
			})
		}, [2]string{"other", "A"}, ErrCorrupt},
		{"rebind to another host", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) { f.Secrets[idx(f, event.LocalTenant, "A")].Hosts = []string{"evil.example"} })
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"drop the host binding", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) { f.Secrets[idx(f, event.LocalTenant, "A")].Hosts = nil })
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"garbage file", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, storeFile), []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"truncated file", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, storeFile))
			if err := os.WriteFile(filepath.Join(dir, storeFile), b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
		{"future version", func(t *testing.T, dir string) {
			edit(t, dir, func(f *storeData) { f.Version = 2 })
		}, [2]string{event.LocalTenant, "A"}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := setup(t)
			tt.tamper(t, dir)
			v, _, err := s.Get(ctx, tt.get[0], tt.get[1])
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Get(%s/%s) after tampering = %v, want %v", tt.get[0], tt.get[1], err, tt.wantErr)
			}
			if v.Len() != 0 {
				t.Errorf("Get returned a value with its error")
			}
			if msg := err.Error(); strings.Contains(msg, valA) || strings.Contains(msg, valB) {
				t.Errorf("error shows a value: %v", err)
			}
		})
	}
}

func TestStoreWrongKey(t *testing.T) {
	ctx := context.Background()
	s, dir := openTestStore(t)
	if err := s.Set(ctx, event.LocalTenant, "A", NewValue([]byte("value-under-key-1")), nil); err != nil {
		t.Fatal(err)
	}
	other, err := Open(dir, fixedKey(bytes.Repeat([]byte{9}, KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Get(ctx, event.LocalTenant, "A"); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Get with another key = %v, want ErrWrongKey", err)
	}
	if err := other.Set(ctx, event.LocalTenant, "B", NewValue([]byte("value-under-key-2")), nil); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Set with another key = %v, want ErrWrongKey (no mixing keys in one store)", err)
	}
	// Listing and deleting need no key.
	if l, err := other.List(ctx, event.LocalTenant); err != nil || len(l) != 1 {
		t.Errorf("List with another key = %v, %v", l, err)
	}

	// Without the key check, the wrong key still fails to open, cleanly.
	b, _ := os.ReadFile(filepath.Join(dir, storeFile))
	var f storeData
	_ = json.Unmarshal(b, &f)
	f.KeyCheck = make([]byte, keyCheckSize)
	b, _ = json.Marshal(&f)
	_ = os.WriteFile(filepath.Join(dir, storeFile), b, 0o600)
	other2, _ := Open(dir, fixedKey(bytes.Repeat([]byte{9}, KeySize)))
	if _, _, err := other2.Get(ctx, event.LocalTenant, "A"); !errors.Is(err, ErrWrongKey) && !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get with forged key check = %v, want an error", err)
	}

	if _, err := Open(dir, fixedKey([]byte("short"))); err != nil {
		t.Fatal(err)
	}
	short, _ := Open(t.TempDir(), fixedKey([]byte("short")))
	if err := short.Set(ctx, event.LocalTenant, "A", NewValue([]byte("abcdef")), nil); err == nil {
		t.Errorf("Set with a 5-byte key succeeded")
	}
}

func TestStoreValidation(t *testing.T) {
	ctx := context.Background()
	s, _ := openTestStore(t)
	const val = "validation-value"
	tests := []struct {
		name         string
		tenant, sec  string
		value        []byte
		hosts        []string
		wantErrorHas string
	}{
		{"empty name", event.LocalTenant, "", []byte(val), nil, "invalid name"},
		{"leading dot", event.LocalTenant, ".x", []byte(val), nil, "must start"},
		{"slash", event.LocalTenant, "a/b", []byte(val), nil, "only letters"},
		{"space", event.LocalTenant, "a b", []byte(val), nil, "only letters"},
		{"too long", event.LocalTenant, strings.Repeat("a", 129), []byte(val), nil, "1 to 128"},
		{"bad tenant", "../x", "ok", []byte(val), nil, "tenant"},
		{"empty value", event.LocalTenant, "ok", nil, nil, "empty value"},
		{"too big", event.LocalTenant, "ok", make([]byte, MaxValueSize+1), nil, "more than"},
		{"bad host", event.LocalTenant, "ok", []byte(val), []string{"a b"}, "invalid host"},
		{"url host", event.LocalTenant, "ok", []byte(val), []string{"https://x.example/"}, "invalid host"},
		{"mid wildcard", event.LocalTenant, "ok", []byte(val), []string{"a.*.example"}, "invalid host"},
		{"empty host", event.LocalTenant, "ok", []byte(val), []string{""}, "invalid host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Set(ctx, tt.tenant, tt.sec, NewValue(tt.value), tt.hosts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErrorHas) {
				t.Fatalf("Set = %v, want error containing %q", err, tt.wantErrorHas)
			}
			if strings.Contains(err.Error(), val) {
				t.Errorf("error shows the value: %v", err)
			}
		})
	}
	for _, good := range []string{"a", "A", "0", "GITHUB_TOKEN", "a.b-c_d", strings.Repeat("z", 128)} {
		if err := ValidName(good); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", good, err)
		}
	}
}

func TestStoreConcurrentGoroutines(t *testing.T) {
	ctx := context.Background()
	s, dir := openTestStore(t)
	const workers, each = 8, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// Each worker opens its own Store, as separate components would.
			s, err := Open(dir, KeyFile(filepath.Join(dir, "key")))
			if err != nil {
				t.Error(err)
				return
			}
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				if err := s.Set(ctx, event.LocalTenant, name, NewValue([]byte("value-"+name)), nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	checkAll(t, s, workers*each, func(i int) string { return fmt.Sprintf("w%d-%d", i/each, i%each) })
}

func checkAll(t *testing.T, s *Store, n int, name func(int) string) {
	t.Helper()
	ctx := context.Background()
	list, err := s.List(ctx, event.LocalTenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("List has %d secrets, want %d: an update was lost", len(list), n)
	}
	for i := range n {
		v, _, err := s.Get(ctx, event.LocalTenant, name(i))
		if err != nil || string(v.Reveal()) != "value-"+name(i) {
			t.Errorf("Get(%s) = %v", name(i), err)
		}
	}
}

const helperEnv = "AIRLOCK_SECRET_TEST_HELPER"

// TestStoreConcurrentProcesses runs two copies of this test binary that set
// secrets in one store at once, while this process does too.
func TestStoreConcurrentProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("the helper process of this test runs only its own part")
	}
	s, dir := openTestStore(t)
	ctx := context.Background()
	// Create the key first so the children share it.
	if _, err := KeyFile(filepath.Join(dir, "key")).Key(ctx); err != nil {
		t.Fatal(err)
	}
	const procs, each = 3, 15
	var cmds []*exec.Cmd
	for p := range procs - 1 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStoreHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir, "HELPER_ID="+strconv.Itoa(p), "HELPER_N="+strconv.Itoa(each))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("helper %d output:\n%s", p, out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	setMany(t, s, procs-1, each)
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper: %v", err)
		}
	}
	checkAll(t, s, procs*each, func(i int) string { return fmt.Sprintf("p%d-%d", i/each, i%each) })
}

func setMany(t *testing.T, s *Store, id, n int) {
	for i := range n {
		name := fmt.Sprintf("p%d-%d", id, i)
		if err := s.Set(context.Background(), event.LocalTenant, name, NewValue([]byte("value-"+name)), nil); err != nil {
			t.Errorf("Set(%s): %v", name, err)
		}
	}
}

// TestStoreHelperProcess is the child of TestStoreConcurrentProcesses.
func TestStoreHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("only run as a helper process")
	}
	id, _ := strconv.Atoi(os.Getenv("HELPER_ID"))
	n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
	s, err := Open(dir, KeyFile(filepath.Join(dir, "key")))
	if err != nil {
		t.Fatal(err)
	}
	setMany(t, s, id, n)
}

func TestStoreLockHonoursContext(t *testing.T) {
	s, _ := openTestStore(t)
	unlock, err := s.lock(context.Background(), 2 /* LOCK_EX */)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Set(ctx, event.LocalTenant, "x", NewValue([]byte("blocked-value")), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Set while locked with a cancelled context = %v, want context.Canceled", err)
	}
}

func FuzzStoreDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"secrets":[]}`))
	f.Add([]byte(`{"version":1,"key_check":"AAAAAAAAAAAAAAAAAAAAAA==","secrets":[{"tenant":"default","name":"x","hosts":["a.example"],"created":"2024-01-01T00:00:00Z","updated":"2024-01-01T00:00:00Z","nonce":"AAAAAAAAAAAAAAAA","ciphertext":"AAAAAAAAAAAAAAAAAAAAAAAA"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"secrets":[{"tenant":"../x"}]}`))
	f.Add([]byte(`{"version":1} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeStore(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("decodeStore error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc, err := encodeStore(d)
		if err != nil {
			t.Fatalf("decoded store does not re-encode: %v", err)
		}
		if _, err := decodeStore(enc); err != nil {
			t.Fatalf("re-encoded store does not decode: %v", err)
		}
	})
}

// TestLegacyLocalTenant: secrets an older airlock stored for the command
// line under "default" are the local tenant's: found, listed, replaced and
// deleted as its own, and never another tenant's.
func TestLegacyLocalTenant(t *testing.T) {
	s, _ := openTestStore(t)
	testLegacyLocalTenant(t, s)
}

// testLegacyLocalTenant: the local tenant reads, replaces and deletes the
// records an older airlock sealed under legacyLocalTenant.
func testLegacyLocalTenant(t *testing.T, s *Store) {
	ctx := context.Background()
	// What an older airlock wrote: records sealed under "default".
	for _, name := range []string{"kept", "replaced", "deleted"} {
		if err := s.Set(ctx, legacyLocalTenant, name, NewValue([]byte("old-"+name)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set(ctx, "acme", "kept", NewValue([]byte("acme-kept")), nil); err != nil {
		t.Fatal(err)
	}
	names := func(tenant string) []string {
		t.Helper()
		infos, err := s.List(ctx, tenant)
		if err != nil {
			t.Fatalf("List(%q) = %v", tenant, err)
		}
		var out []string
		for _, i := range infos {
			out = append(out, i.Name)
		}
		return out
	}
	if got, want := names(event.LocalTenant), []string{"deleted", "kept", "replaced"}; !slices.Equal(got, want) {
		t.Errorf("List(local) = %v, want %v", got, want)
	}
	if v, _, err := s.Get(ctx, event.LocalTenant, "kept"); err != nil || string(v.Reveal()) != "old-kept" {
		t.Errorf("Get(local, kept) = %q, %v; want the legacy value", v.Reveal(), err)
	}
	if v, _, err := s.Get(ctx, "acme", "kept"); err != nil || string(v.Reveal()) != "acme-kept" {
		t.Errorf("Get(acme, kept) = %q, %v; want acme's own value", v.Reveal(), err)
	}
	if _, _, err := s.Get(ctx, "acme", "replaced"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(acme, replaced) = %v, want ErrNotFound: the local tenant's secrets are not another's", err)
	}

	if err := s.Set(ctx, event.LocalTenant, "replaced", NewValue([]byte("new-replaced")), nil); err != nil {
		t.Fatal(err)
	}
	if v, _, err := s.Get(ctx, event.LocalTenant, "replaced"); err != nil || string(v.Reveal()) != "new-replaced" {
		t.Errorf("Get(local, replaced) after Set = %q, %v; want the new value", v.Reveal(), err)
	}
	if err := s.Delete(ctx, event.LocalTenant, "deleted"); err != nil {
		t.Fatalf("Delete(local, deleted) = %v", err)
	}
	if _, _, err := s.Get(ctx, event.LocalTenant, "deleted"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(local, deleted) after Delete = %v, want ErrNotFound", err)
	}
	if got, want := names(event.LocalTenant), []string{"kept", "replaced"}; !slices.Equal(got, want) {
		t.Errorf("List(local) after Set and Delete = %v, want %v", got, want)
	}
	// Set moved "replaced" to the local tenant; Delete took "deleted":
	// the legacy name keeps only what was not touched.
	if got, want := names(legacyLocalTenant), []string{"kept"}; !slices.Equal(got, want) {
		t.Errorf("List(%q) after Set and Delete = %v, want %v", legacyLocalTenant, got, want)
	}
}
