package e2b

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

var testKey = bytes.Repeat([]byte("k"), 32)

// TestSealed: a record's sealed secrets open only under the replicas' key,
// only for the record and sandbox they were sealed for, and not once a
// byte of them changed.
func TestSealed(t *testing.T) {
	k, err := newReplicaKeys(testKey)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newReplicaKeys(bytes.Repeat([]byte("o"), 32))
	want := boxState{Token: "tok", Traffic: "traffic", Envs: map[string]string{"SECRET": "hunter22"}, AutoPause: true}
	sealed, err := k.sealJSON("run-1", "sbx-1", want)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "hunter22") || strings.Contains(sealed, "SECRET") {
		t.Fatalf("sealed blob %q shows the environment", sealed)
	}
	var got boxState
	if err := k.openJSON("run-1", "sbx-1", sealed, &got); err != nil || got.Token != "tok" || got.Envs["SECRET"] != "hunter22" || !got.AutoPause {
		t.Fatalf("open = %+v, %v; want what was sealed", got, err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(sealed, sealPrefix))
	raw[len(raw)-1] ^= 1
	flipped := sealPrefix + base64.RawURLEncoding.EncodeToString(raw)
	for _, c := range []struct {
		name, run, id, blob string
		k                   *replicaKeys
	}{
		{"another record", "run-2", "sbx-1", sealed, k},
		{"another sandbox", "run-1", "sbx-2", sealed, k},
		{"another key", "run-1", "sbx-1", sealed, other},
		{"a flipped bit", "run-1", "sbx-1", flipped, k},
		{"no prefix", "run-1", "sbx-1", strings.TrimPrefix(sealed, sealPrefix), k},
		{"truncated", "run-1", "sbx-1", sealed[:10], k},
		{"empty", "run-1", "sbx-1", "", k},
	} {
		var v boxState
		if err := c.k.openJSON(c.run, c.id, c.blob, &v); err == nil {
			t.Errorf("%s: opened: %+v", c.name, v)
		}
	}
	if _, err := newReplicaKeys([]byte("short")); err == nil {
		t.Error("a 5-byte key was taken")
	}
}

// TestPeerOf: a replica relays only to an address advertised by one that
// holds the key: one named in a lease owner by someone who can write the
// store but lacks the key (forged, altered, or unsigned) is refused.
func TestPeerOf(t *testing.T) {
	k, _ := newReplicaKeys(testKey)
	other, _ := newReplicaKeys(bytes.Repeat([]byte("o"), 32))
	s := &Server{keys: k}
	peer := Peer{APIURL: "http://10.0.0.1:3000", SandboxURL: "http://10.0.0.1:49983"}
	owner := ownerName("0123456789abcdef0123456789abcdef", "aabbccdd", peer, k)
	got, ok := s.peerOf(owner)
	if !ok || got != peer {
		t.Fatalf("peerOf(%q) = %+v, %v; want %+v", owner, got, ok, peer)
	}
	if l := ownerLabel(owner); strings.Count(l, ",") != 1 || strings.HasSuffix(owner, l) {
		t.Errorf("ownerLabel(%q) = %q, want it without its MAC", owner, l)
	}
	i := strings.LastIndexByte(owner, ',')
	for _, c := range []struct{ name, owner string }{
		{"redirected", strings.Replace(owner, "10.0.0.1:3000", "evil.example:80", 1)},
		{"another key's", ownerName("0123456789abcdef0123456789abcdef", "aabbccdd", peer, other)},
		{"no MAC", owner[:i]},
		{"empty MAC", owner[:i+1]},
		{"no address", ownerName("0123456789abcdef0123456789abcdef", "aabbccdd", Peer{}, k)},
		{"a run worker's", "worker-host:123"},
	} {
		if p, ok := s.peerOf(c.owner); ok {
			t.Errorf("%s owner %q: relayed to %+v", c.name, c.owner, p)
		}
	}
	if _, ok := (&Server{}).peerOf(owner); ok {
		t.Error("a replica without the key relays")
	}
}

func TestSandboxOfTask(t *testing.T) {
	for task, want := range map[string]string{
		"E2B sandbox abc123, template base": "abc123",
		"E2B sandbox abc123":                "abc123",
		"run the tests":                     "",
		"":                                  "",
	} {
		if got := sandboxOfTask(task); got != want {
			t.Errorf("sandboxOfTask(%q) = %q, want %q", task, got, want)
		}
	}
}

// FuzzOpenSealed: any blob opens or fails, without a panic, and none
// opens that was not sealed under the key.
func FuzzOpenSealed(f *testing.F) {
	k, _ := newReplicaKeys(testKey)
	good, _ := k.sealJSON("run", "sbx", boxState{Token: "t"})
	f.Add(good)
	f.Add("v1.")
	f.Add("v1.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, blob string) {
		var v boxState
		if err := k.openJSON("run", "sbx", blob, &v); err == nil && blob != good {
			t.Fatalf("opened a blob not sealed here: %q", blob)
		}
	})
}

// FuzzPeerOf: no owner name but one this key signed names an address.
func FuzzPeerOf(f *testing.F) {
	k, _ := newReplicaKeys(testKey)
	s := &Server{keys: k}
	good := ownerName("0123456789abcdef0123456789abcdef", "aabbccdd", Peer{APIURL: "http://a:1", SandboxURL: "http://a:2"}, k)
	f.Add(good)
	f.Add("e2b/x/y@http://a:1,http://a:2,00")
	f.Add("e2b/x/y")
	f.Add(",,,@,")
	f.Fuzz(func(t *testing.T, owner string) {
		if _, ok := s.peerOf(owner); ok && owner != good {
			t.Fatalf("relays for an owner this key did not sign: %q", owner)
		}
	})
}
