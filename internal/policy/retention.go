package policy

import "time"

// Retention says how long a run held to this policy keeps its content
// after it ended: the fields of airlock serve's per-tenant retention
// (docs/retention.md). 0 keeps that content forever (the default). Where
// the run's tenant has a rule too, each field takes the shorter of the
// two that are set (Stricter): a policy can shorten what its runs keep,
// never lengthen what the operator's tenant rule allows.
type Retention struct {
	// Events is how long after the run ended its events' payloads (the
	// task, model messages, tool arguments and outputs) are kept; then
	// they become tombstones and the hash chain still verifies.
	Events Duration `yaml:"events,omitempty"`
	// Runs is how long after the run ended the run is kept at all: then
	// it is purged with its forks, artifacts and blobs.
	Runs Duration `yaml:"runs,omitempty"`
	// Checkpoints is how long after the run ended its workspace
	// checkpoints are kept: then its snapshot.taken payloads become
	// tombstones and the next checkpoint collection frees their
	// manifests and chunks; the run still shows and verifies, and can no
	// longer be resumed or forked.
	Checkpoints Duration `yaml:"checkpoints,omitempty"`
	// Artifacts is how long after the run ended its artifacts are kept:
	// then their records go, their artifact.stored payloads become
	// tombstones, and their blobs go unless something else names them.
	Artifacts Duration `yaml:"artifacts,omitempty"`
}

func (r Retention) isZero() bool { return r == Retention{} }

// maxRetention bounds a retention setting: longer is a mistake (a unit
// typed wrong), and "keep forever" is 0.
const maxRetention = Duration(100 * 365 * 24 * time.Hour)

func (r *Retention) validate(p *problems) {
	for _, f := range []struct {
		field string
		v     Duration
	}{{"retention.events", r.Events}, {"retention.runs", r.Runs}, {"retention.checkpoints", r.Checkpoints}, {"retention.artifacts", r.Artifacts}} {
		switch {
		case f.v < 0:
			p.add(f.field, "a duration like 720h; 0 keeps the content forever", "%s is negative", f.v)
		case f.v > 0 && f.v < Duration(time.Minute):
			p.add(f.field, "a duration like 720h; 0 keeps the content forever", "%s is under a minute", f.v)
		case f.v > maxRetention:
			p.add(f.field, "a duration like 720h; 0 keeps the content forever", "%s is over 100 years", f.v)
		}
	}
	if r.Events > 0 && r.Runs > 0 && r.Runs < r.Events {
		p.add("retention.runs", "a run is purged with its events: runs must not be shorter than events",
			"runs %s is shorter than events %s", r.Runs, r.Events)
	}
}

// Stricter returns the retention of a run held to both a and b: for each
// field, the shorter of the two durations that are set (0, keep forever,
// is the longest).
func Stricter(a, b Retention) Retention {
	shorter := func(x, y Duration) Duration {
		switch {
		case x == 0:
			return y
		case y == 0:
			return x
		}
		return min(x, y)
	}
	return Retention{Events: shorter(a.Events, b.Events), Runs: shorter(a.Runs, b.Runs), Checkpoints: shorter(a.Checkpoints, b.Checkpoints), Artifacts: shorter(a.Artifacts, b.Artifacts)}
}
