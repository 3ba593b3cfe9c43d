package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// Events bounds what a run's sandboxes report through their event channel
// (policy.Events, in the run's config). The zero value is the defaults.
type Events struct {
	Off              bool        `json:"off,omitempty"`
	Rate             int         `json:"rate,omitempty"`
	Burst            int         `json:"burst,omitempty"`
	MaxSize          int64       `json:"max_size,omitempty"`
	ArtifactMaxSize  int64       `json:"artifact_max_size,omitempty"`
	ArtifactMaxCount int         `json:"artifact_max_count,omitempty"`
	Kinds            []EventKind `json:"kinds,omitempty"`
	// Rules are the policy's events.rules: none by default, and then no
	// sandbox event is an input of any decision.
	Rules []EventRule `json:"rules,omitempty"`
}

// EventRule is an events rule of the policy (policy.EventRule).
type EventRule struct {
	Kinds  []string `json:"kinds"`
	When   string   `json:"when"`
	Action string   `json:"action"`
	Reason string   `json:"reason,omitempty"`
}

// EventKind is a custom kind of sandbox event the policy admits.
type EventKind struct {
	Name    string `json:"name"`
	MaxSize int64  `json:"max_size,omitempty"`
}

// EventsOf is a policy's events section as a run's config keeps it.
func EventsOf(e policy.Events) Events {
	out := Events{
		Off: e.Off, Rate: e.Rate, Burst: e.Burst, MaxSize: int64(e.MaxSize),
		ArtifactMaxSize: int64(e.Artifacts.MaxSize), ArtifactMaxCount: e.Artifacts.MaxCount,
	}
	for _, k := range e.Kinds {
		out.Kinds = append(out.Kinds, EventKind{Name: k.Name, MaxSize: int64(k.MaxSize)})
	}
	for _, r := range e.Rules {
		out.Rules = append(out.Rules, EventRule{Kinds: slices.Clone(r.Kinds), When: r.When, Action: r.Action, Reason: r.Reason})
	}
	return out
}

func (e Events) policy() policy.Events {
	out := policy.Events{
		Off: e.Off, Rate: e.Rate, Burst: e.Burst, MaxSize: policy.Size(e.MaxSize),
		Artifacts: policy.EventArtifacts{MaxSize: policy.Size(e.ArtifactMaxSize), MaxCount: e.ArtifactMaxCount},
	}
	for _, k := range e.Kinds {
		out.Kinds = append(out.Kinds, policy.EventKindRule{Name: k.Name, MaxSize: policy.Size(k.MaxSize)})
	}
	for _, r := range e.Rules {
		out.Rules = append(out.Rules, policy.EventRule{Kinds: slices.Clone(r.Kinds), When: r.When, Action: r.Action, Reason: r.Reason})
	}
	return out
}

// Timing of a sandbox's event reader.
const (
	// droppedEvery is how often, at most, the counts of what a sandbox
	// sent that was not recorded are recorded while they grow (and once
	// more when the sandbox goes).
	droppedEvery = 5 * time.Second
	// eventsDrainTimeout bounds the drain of a sandbox's channel before it
	// is destroyed.
	eventsDrainTimeout = 30 * time.Second
	// artifactTimeout bounds the fetch of one declared artifact.
	artifactTimeout = time.Minute
)

// sandboxArtifactPrefix names the artifacts sandboxes declare:
// sandbox/NAME for the default sandbox, sandbox/SANDBOX/NAME for another.
const sandboxArtifactPrefix = "sandbox/"

// artifactCount counts the artifacts the run's sandboxes declared and this
// driver stored, against the policy's max count.
type artifactCount struct {
	mu sync.Mutex
	n  int // guarded by mu
}

// watchEvents reads sandbox name's event channel in a goroutine of its own
// until the returned stop is called, which drains the channel (what
// commands that have ended wrote through airlock-event is recorded) and
// waits for the goroutine. Each line the run's events policy accepts is
// recorded as a sandbox.event; a declared artifact is fetched and stored.
// What the sandbox says is data: nothing here acts on it beyond recording
// it and reading the file it names, as the sandbox's default user, within
// the policy's bounds.
//
// The goroutine touches neither the loop's state nor the run's sandboxes'
// locks (destroyAll holds them while it stops it): it records with record,
// and reads the one sandbox it was given.
func (d *driver) watchEvents(ctx context.Context, name string, sb sandbox.Sandbox) (stop func()) {
	// A sandbox that is gone or whose executor refuses has nothing to
	// read: the run goes on without its reports.
	return sandbox.WatchLines(ctx, sb, eventsDrainTimeout, func(ctx context.Context, lines <-chan sandbox.EventLine) {
		d.readEvents(ctx, name, sb, lines)
	})
}

// readEvents records what lines carries until it is closed.
func (d *driver) readEvents(ctx context.Context, name string, sb sandbox.Sandbox, lines <-chan sandbox.EventLine) {
	f := report.NewFilter(d.cfg.Events.policy(), name)
	// The config was checked when the run was made: rules that do not
	// compile now (a policy package that changed) decide nothing, and
	// say so once.
	rules, rerr := policy.CompileEventRules(d.cfg.Events.policy())
	if rerr != nil {
		_, _ = d.record(ctx, event.PolicyDecision{Rule: "events.rules", Decision: "error", Reason: "policy: the events rules do not compile: " + rerr.Error(), Input: "sandbox.event"})
	}
	// Nothing dropped yet is nothing to record.
	recorded := event.SandboxEventsDropped{Sandbox: name}
	var last time.Time
	flush := func(force bool) {
		cur := f.Dropped()
		if cur == recorded || (!force && time.Since(last) < droppedEvery) {
			return
		}
		if _, err := d.record(ctx, cur); err != nil {
			// The store refuses the run's writes (the drive's lease
			// is gone, or the store failed): the drive itself sees
			// it at its next write.
			return
		}
		recorded, last = cur, time.Now()
	}
	defer flush(true)
	for l := range lines {
		if l.Drops != nil {
			f.Executor(l.Drops.Oversize, l.Drops.Rate, l.Drops.Queue, l.Drops.Conns)
			flush(false)
			continue
		}
		ev, err := f.Accept(l.Line, time.Now())
		if err != nil {
			flush(false)
			continue
		}
		if d.cfg.Secrets.Results != string(policy.SecretKeep) {
			report.Redact(d.scan, &ev)
		}
		ps := []event.Payload{}
		if ev.Kind == "artifact" {
			stored, err := d.sandboxArtifact(ctx, name, sb, &ev, f.Config())
			if err != nil {
				ev.Refused = err.Error()
				f.RefuseArtifact()
			} else {
				ps = append(ps, stored)
			}
		}
		ps = append([]event.Payload{ev}, ps...)
		stored, err := d.record(ctx, ps...)
		if err != nil || rules == nil || len(stored) == 0 {
			continue // err: as flush's
		}
		d.decideEvent(ctx, rules, name, &ev, stored[0].Seq)
	}
}

// decideEvent runs the policy's events rules on ev, recorded at seq, after
// its validation and redaction, and records what a rule decided as a
// policy.decision naming the event (Input): data for the loop, which acts
// on it at its next step (state.eventStop, state.eventHold). Nothing of it
// goes into the model's conversation.
func (d *driver) decideEvent(ctx context.Context, rules *policy.EventRules, name string, ev *event.SandboxEvent, seq int64) {
	raw, err := json.Marshal(ev)
	if err != nil {
		return
	}
	d.mu.Lock()
	sh := d.shared
	d.mu.Unlock()
	dec, ok := rules.DecideEvent(ev.Kind, raw, policy.RunInfo{Tenant: d.run.Tenant, Task: d.run.Task, Step: int64(sh.steps)}, name)
	if !ok {
		return
	}
	pd := event.PolicyDecision{Decision: dec.Action, Rule: dec.Rule, Reason: dec.Reason, Input: fmt.Sprintf("sandbox.event seq %d", seq)}
	if pd.Decision == "" {
		pd.Decision = "error" // the rule failed: it decides nothing
	}
	_, _ = d.record(ctx, pd)
}

// sandboxArtifact fetches and stores the file an artifact event declares,
// and sets ev.Artifact to the name it is stored under. The path must name
// a regular file below /workspace or the sandbox user's home, reached
// without a symbolic link on the way or at its end, of at most the policy's size; the
// run keeps at most the policy's count. The read is the sandbox's own file
// operation, as its default user: it resolves inside the sandbox, so no
// path or link can name a host file; the checks keep special files (FIFOs,
// devices, /proc) and other users' files out of the run's artifacts.
func (d *driver) sandboxArtifact(ctx context.Context, name string, sb sandbox.Sandbox, ev *event.SandboxEvent, cfg policy.Events) (event.ArtifactStored, error) {
	ctx, cancel := context.WithTimeout(ctx, artifactTimeout)
	defer cancel()
	p := ev.Path
	if !under(p, "/workspace") && !under(p, "/home") && !under(p, "/root") {
		return event.ArtifactStored{}, errors.New("the path is not below /workspace or a home directory")
	}
	// Every directory on the way is a real directory, not a link (a
	// link to /etc below /workspace would lead the read there). The
	// sandbox could swap one in after this check: the read is still its
	// default user's, inside the sandbox, and what it gets the sandbox
	// could have copied into /workspace itself.
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		fi, err := sb.Stat(ctx, dir)
		if err != nil {
			return event.ArtifactStored{}, fmt.Errorf("stat %s: %w", dir, errors.Unwrap(err))
		}
		if !fi.Mode.IsDir() {
			return event.ArtifactStored{}, fmt.Errorf("%s is not a directory (a symbolic link?)", dir)
		}
	}
	fi, err := sb.Stat(ctx, p)
	if err != nil {
		return event.ArtifactStored{}, fmt.Errorf("stat: %w", errors.Unwrap(err))
	}
	switch {
	case fi.Mode&fs.ModeSymlink != 0:
		return event.ArtifactStored{}, errors.New("the path is a symbolic link")
	case !fi.Mode.IsRegular():
		return event.ArtifactStored{}, fmt.Errorf("not a regular file (%s)", fi.Mode.Type())
	case fi.Size > int64(cfg.Artifacts.MaxSize):
		return event.ArtifactStored{}, fmt.Errorf("%d bytes, the policy allows %d", fi.Size, int64(cfg.Artifacts.MaxSize))
	}
	d.arts.mu.Lock()
	full := d.arts.n >= cfg.Artifacts.MaxCount
	if !full {
		d.arts.n++
	}
	d.arts.mu.Unlock()
	if full {
		return event.ArtifactStored{}, fmt.Errorf("the run has stored the %d artifacts the policy allows", cfg.Artifacts.MaxCount)
	}
	keep := false
	defer func() {
		if !keep {
			d.arts.mu.Lock()
			d.arts.n--
			d.arts.mu.Unlock()
		}
	}()
	// One byte more than allowed tells a file that grew since the stat.
	data, err := sb.ReadFile(ctx, p, int64(cfg.Artifacts.MaxSize)+1)
	if err != nil {
		return event.ArtifactStored{}, fmt.Errorf("read: %w", errors.Unwrap(err))
	}
	if int64(len(data)) > int64(cfg.Artifacts.MaxSize) {
		return event.ArtifactStored{}, fmt.Errorf("more than the %d bytes the policy allows", int64(cfg.Artifacts.MaxSize))
	}
	base := ev.Name
	if base == "" {
		base = path.Base(p)
	}
	artName := sandboxArtifactPrefix + base
	if name != DefaultSandbox {
		artName = sandboxArtifactPrefix + name + "/" + base
	}
	media := ev.MediaType
	if media == "" {
		media = "application/octet-stream"
	}
	digest, size, err := d.e.o.Blobs.Put(ctx, bytes.NewReader(data))
	if err != nil {
		return event.ArtifactStored{}, fmt.Errorf("store: %w", err)
	}
	if _, err := d.e.o.Store.PutArtifact(ctx, store.Artifact{RunID: d.run.ID, Name: artName, Digest: digest, Size: size, MediaType: media}); err != nil {
		if errors.Is(err, store.ErrExists) {
			return event.ArtifactStored{}, fmt.Errorf("the run already has an artifact %s", artName)
		}
		return event.ArtifactStored{}, fmt.Errorf("store: %w", err)
	}
	keep = true
	ev.Artifact = artName
	return event.ArtifactStored{Name: artName, Digest: digest, Size: size, MediaType: media, Kind: "sandbox"}, nil
}

// under reports whether clean absolute path p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
