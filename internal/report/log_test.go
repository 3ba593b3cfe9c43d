package report_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/secret/scan"
)

// token is a GitHub token of the shape the scanner finds (not a real one).
const token = "ghp_" + "Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i"

func TestLog(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name    string
		cfg     policy.Events
		size    int
		keep    bool // the policy keeps secrets in results: no scanner
		lines   []string
		kinds   []string
		evicted uint64
		check   func(t *testing.T, s report.Snapshot)
	}{
		{
			name:  "accepted lines are kept, refused ones counted",
			lines: []string{`{"kind":"progress","pct":40,"message":"x"}`, `not json`, `{"kind":"nope"}`, `{"kind":"log","message":"hi"}`},
			kinds: []string{"progress", "log"},
			check: func(t *testing.T, s report.Snapshot) {
				if s.Dropped.Malformed != 1 || s.Dropped.UnknownKind != 1 {
					t.Errorf("dropped = %+v, want 1 malformed and 1 unknown kind", s.Dropped)
				}
				if s.Events[0].Event.Source != "sandbox" || s.Events[0].Event.Sandbox != "sb" {
					t.Errorf("first event = %+v, want source sandbox, sandbox sb", s.Events[0].Event)
				}
			},
		},
		{
			name:    "the ring keeps the last size",
			size:    3,
			lines:   []string{`{"kind":"log","message":"1"}`, `{"kind":"log","message":"2"}`, `{"kind":"log","message":"3"}`, `{"kind":"log","message":"4"}`, `{"kind":"log","message":"5"}`},
			kinds:   []string{"log", "log", "log"},
			evicted: 2,
			check: func(t *testing.T, s report.Snapshot) {
				if s.Events[0].Seq != 3 || s.Events[0].Event.Message != "3" || s.Next != 6 {
					t.Errorf("first = %+v, next = %d; want seq 3 message 3, next 6", s.Events[0], s.Next)
				}
			},
		},
		{
			name:  "artifacts are kept refused",
			lines: []string{`{"kind":"artifact","path":"/workspace/r.html"}`},
			kinds: []string{"artifact"},
			check: func(t *testing.T, s report.Snapshot) {
				if s.Events[0].Event.Refused == "" || s.Dropped.Artifacts != 1 {
					t.Errorf("artifact = %+v, dropped %+v; want refused and counted", s.Events[0].Event, s.Dropped)
				}
			},
		},
		{
			name:  "the rate cap applies",
			cfg:   policy.Events{Rate: 1, Burst: 2},
			lines: []string{`{"kind":"log","message":"1"}`, `{"kind":"log","message":"2"}`, `{"kind":"log","message":"3"}`},
			kinds: []string{"log", "log"},
			check: func(t *testing.T, s report.Snapshot) {
				if s.Dropped.Rate != 1 {
					t.Errorf("dropped = %+v, want 1 for rate", s.Dropped)
				}
			},
		},
		{
			name:  "secrets are redacted as in a run's events",
			cfg:   policy.Events{Kinds: []policy.EventKindRule{{Name: "deploy"}}},
			lines: []string{`{"kind":"log","message":"token ` + token + `"}`, `{"kind":"deploy","data":{"t":"` + token + `"}}`},
			kinds: []string{"log", "deploy"},
			check: func(t *testing.T, s report.Snapshot) {
				for _, e := range s.Events {
					if strings.Contains(e.Event.Message, token) || strings.Contains(string(e.Event.Data), token) || !slices.Contains(e.Event.Secrets, "github-pat") {
						t.Errorf("event %+v (data %s): want the token redacted and github-pat named", e.Event, e.Event.Data)
					}
				}
			},
		},
		{
			name:  "a policy that keeps secrets keeps them",
			keep:  true,
			lines: []string{`{"kind":"log","message":"token ` + token + `"}`},
			kinds: []string{"log"},
			check: func(t *testing.T, s report.Snapshot) {
				if !strings.Contains(s.Events[0].Event.Message, token) || len(s.Events[0].Event.Secrets) != 0 {
					t.Errorf("event %+v: want the token kept", s.Events[0].Event)
				}
			},
		},
		{
			name:  "events off keeps nothing",
			cfg:   policy.Events{Off: true},
			lines: []string{`{"kind":"log","message":"1"}`},
			check: func(t *testing.T, s report.Snapshot) {
				if s.Dropped.Invalid != 1 {
					t.Errorf("dropped = %+v, want 1 refused", s.Dropped)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc := scan.NewOrDefault(scan.Options{})
			if tc.keep {
				sc = nil
			}
			l := report.NewLog(tc.cfg, "sb", tc.size, sc)
			for _, line := range tc.lines {
				l.Line([]byte(line), now) // one instant: only the burst passes the rate cap
			}
			s := l.After(0, 0)
			var kinds []string
			for _, e := range s.Events {
				kinds = append(kinds, e.Event.Kind)
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tc.kinds) || s.Evicted != tc.evicted {
				t.Fatalf("kinds = %v, evicted %d; want %v, %d", kinds, s.Evicted, tc.kinds, tc.evicted)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func TestLogWaitAndEnd(t *testing.T) {
	l := report.NewLog(policy.Events{}, "sb", 0, nil)
	s := l.After(0, 0)
	l.Line([]byte(`{"kind":"log","message":"a"}`), time.Now())
	select {
	case <-s.Changed:
	default:
		t.Fatal("Changed not closed by a new event")
	}
	s = l.After(l.After(0, 0).Next-1, 0)
	if len(s.Events) != 0 {
		t.Fatalf("after the last seen: %v, want none", s.Events)
	}
	s = l.After(0, 0)
	if len(s.Events) != 1 {
		t.Fatalf("after 0: %d events, want 1", len(s.Events))
	}
	l.End()
	select {
	case <-s.Changed:
	default:
		t.Fatal("Changed not closed by End")
	}
	l.Line([]byte(`{"kind":"log","message":"b"}`), time.Now())
	if s := l.After(0, 0); !s.Ended || len(s.Events) != 1 {
		t.Fatalf("after End: ended %v, %d events; want ended and 1", s.Ended, len(s.Events))
	}
}

// TestLogPersistRestore: Persist is handed each kept entry once, in
// order, redacted, never a refused line; a log restored from those
// entries continues their numbering, counts what it does not hold as
// evicted, and hands restored entries to no one.
func TestLogPersistRestore(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := report.NewLog(policy.Events{}, "sb", 0, scan.NewOrDefault(scan.Options{}))
	var kept []report.Entry
	l.Persist(func(e report.Entry) { kept = append(kept, e) })
	for i, line := range []string{`{"kind":"progress","pct":10,"message":"a"}`, `not json`, `{"kind":"log","message":"key ` + token + `"}`, `{"kind":"progress","pct":20,"message":"b"}`} {
		l.Line([]byte(line), now.Add(time.Duration(i)*time.Second))
	}
	if len(kept) != 3 || kept[0].Seq != 1 || kept[1].Seq != 2 || kept[2].Seq != 3 {
		t.Fatalf("persisted = %+v, want seq 1-3", kept)
	}
	if strings.Contains(kept[1].Event.Message, token) {
		t.Errorf("persisted %q: the token was not redacted", kept[1].Event.Message)
	}
	for _, size := range []int{0, 2} {
		r := report.NewLog(policy.Events{}, "sb", size, nil)
		var again []report.Entry
		r.Persist(func(e report.Entry) { again = append(again, e) })
		r.Follow(kept)
		r.Line([]byte(`{"kind":"progress","pct":30,"message":"c"}`), now.Add(time.Minute))
		s := r.After(0, 0)
		var seqs []uint64
		for _, e := range s.Events {
			seqs = append(seqs, e.Seq)
		}
		want, evicted := []uint64{1, 2, 3, 4}, uint64(0)
		if size == 2 {
			want, evicted = []uint64{3, 4}, 2
		}
		if !slices.Equal(seqs, want) || s.Evicted != evicted || s.Next != 5 {
			t.Errorf("size %d: restored log = %v (evicted %d, next %d), want %v (evicted %d, next 5)", size, seqs, s.Evicted, s.Next, want, evicted)
		}
		if len(again) != 1 || again[0].Seq != 4 || again[0].Event.Message != "c" {
			t.Errorf("size %d: persisted after the restore = %+v, want only seq 4", size, again)
		}
	}
}

// TestLogFollow: entries another process keeps, added as they come: each
// once, in its own numbering, a gap counted as evicted, nothing after End.
func TestLogFollow(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	entry := func(seq uint64) report.Entry {
		return report.Entry{Seq: seq, Time: now, Event: event.SandboxEvent{Kind: "progress", Message: fmt.Sprint(seq)}}
	}
	l := report.NewLog(policy.Events{}, "sb", 3, nil)
	seqs := func() (out []uint64) {
		for _, e := range l.After(0, 0).Events {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, c := range []struct {
		add     []uint64
		want    []uint64
		evicted uint64
	}{
		{nil, nil, 0},
		{[]uint64{1, 2}, []uint64{1, 2}, 0},
		{[]uint64{1, 2, 3}, []uint64{1, 2, 3}, 0}, // 1 and 2 again: taken once
		{[]uint64{6}, []uint64{2, 3, 6}, 3},       // 4 and 5 never seen, 1 pushed out
		{[]uint64{5, 7}, []uint64{3, 6, 7}, 4},    // 5 is older than what it holds
	} {
		var es []report.Entry
		for _, s := range c.add {
			es = append(es, entry(s))
		}
		l.Follow(es)
		if s := l.After(0, 0); !slices.Equal(seqs(), c.want) || s.Evicted != c.evicted {
			t.Fatalf("after %v: %v (evicted %d), want %v (evicted %d)", c.add, seqs(), s.Evicted, c.want, c.evicted)
		}
	}
	if n := l.After(0, 0).Next; n != 8 {
		t.Errorf("Next = %d, want 8", n)
	}
	l.End()
	l.Follow([]report.Entry{entry(8)})
	if s := l.After(0, 0); !slices.Equal(seqs(), []uint64{3, 6, 7}) || !s.Ended {
		t.Errorf("after End: %v (ended %v), want [3 6 7], ended", seqs(), s.Ended)
	}
}
