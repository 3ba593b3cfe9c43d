package engine

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// TestCheckScript: a script that parsed is remembered and not parsed
// again; one that did not is refused every time and never remembered; the
// set stays within scriptsKept.
func TestCheckScript(t *testing.T) {
	e := &Engine{scripts: map[[sha256.Size]byte]struct{}{}}
	good := []byte("turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n")
	bad := []byte("turns: [unclosed\n")
	for i := range 2 {
		if err := e.checkScript(good); err != nil {
			t.Fatalf("checkScript(good) #%d = %v", i, err)
		}
		if err := e.checkScript(bad); err == nil {
			t.Fatalf("checkScript(bad) #%d succeeded", i)
		}
	}
	if _, ok := e.scripts[sha256.Sum256(good)]; !ok || len(e.scripts) != 1 {
		t.Fatalf("remembered %d scripts (good among them: %v), want only the good one", len(e.scripts), ok)
	}
	for i := range scriptsKept + 10 {
		s := fmt.Appendf(nil, "turns:\n  - text: step %d\n", i)
		if err := e.checkScript(s); err != nil {
			t.Fatalf("checkScript(%q) = %v", s, err)
		}
		if len(e.scripts) > scriptsKept {
			t.Fatalf("%d scripts remembered, over %d", len(e.scripts), scriptsKept)
		}
	}
}
