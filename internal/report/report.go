// Package report is the host's check of what a sandbox reports about itself
// through its event channel (airlock-event, /run/airlock/events): it turns
// one line the executor forwarded into an event.SandboxEvent, or refuses it
// with a reason, and keeps the policy's rate limit per sandbox.
//
// Everything a line says is untrusted: Decode parses it strictly (one JSON
// object, known fields only, each kind its own fields, bounded strings,
// finite numbers), strips control characters that could rewrite a terminal
// or a page, and never lets a sandbox set the fields the host owns (Source,
// Sandbox, Artifact, Refused). The events it returns are data to record and
// show, never an instruction or a decision's input.
//
// The package is a leaf: it does no I/O and imports only event and policy.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
)

// Reasons a line is refused (RefusedError.Reason), each counted in
// event.SandboxEventsDropped.
const (
	ReasonMalformed   = "malformed"    // not one JSON object of known fields
	ReasonUnknownKind = "unknown_kind" // a kind neither built in nor listed by the policy
	ReasonOversize    = "oversize"     // longer than the kind's max size
	ReasonRate        = "rate"         // beyond the policy's rate and burst
	ReasonInvalid     = "invalid"      // a field out of its bounds
	ReasonOff         = "off"          // the policy turns the channel off
)

// RefusedError says why a line was not recorded.
type RefusedError struct {
	Reason string
	Detail string
}

func (e *RefusedError) Error() string { return "sandbox event refused (" + e.Reason + "): " + e.Detail }

func refuse(reason, format string, args ...any) error {
	return &RefusedError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Bounds of the fields of a built-in kind.
const (
	maxMessage = 2048
	maxName    = 256
	maxUnit    = 32
	maxPath    = 4096
	maxMedia   = 128
)

// wire is a line's shape: every field any kind may carry.
type wire struct {
	Kind      *string         `json:"kind"`
	Message   *string         `json:"message"`
	Level     *string         `json:"level"`
	Pct       *float64        `json:"pct"`
	Name      *string         `json:"name"`
	Value     *float64        `json:"value"`
	Unit      *string         `json:"unit"`
	Status    *string         `json:"status"`
	DurationS *float64        `json:"duration_s"`
	Path      *string         `json:"path"`
	Type      *string         `json:"type"`
	Data      json.RawMessage `json:"data"`
}

// fields lists which of wire's fields each built-in kind may set (kind
// aside), and which of them it must.
var fields = map[string]struct{ may, must []string }{
	"progress": {may: []string{"message", "pct"}},
	"log":      {may: []string{"message", "level"}, must: []string{"message"}},
	"metric":   {may: []string{"name", "value", "unit"}, must: []string{"name", "value"}},
	"artifact": {may: []string{"path", "type", "name"}, must: []string{"path"}},
	"test":     {may: []string{"name", "status", "duration_s"}, must: []string{"name", "status"}},
}

var (
	mediaType = regexp.MustCompile(`^[a-z0-9][a-z0-9!#$&^_.+-]{0,62}/[a-z0-9][a-z0-9!#$&^_.+-]{0,62}$`)
	// artifactName is a name an artifact may be stored under (below
	// "sandbox/"): path segments of safe characters.
	artifactName = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
)

// Decode checks one line against the policy's kinds (cfg resolved: see
// policy.Events.Resolved) and returns its event, without Sandbox. It keeps
// no state: the rate is Filter's.
func Decode(line []byte, cfg policy.Events) (event.SandboxEvent, error) {
	var ev event.SandboxEvent
	if len(line) > policy.MaxEventSize {
		return ev, refuse(ReasonOversize, "%d bytes, at most %d", len(line), policy.MaxEventSize)
	}
	var w wire
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return ev, refuse(ReasonMalformed, "%v", err)
	}
	if rest := bytes.TrimLeft(line[d.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return ev, refuse(ReasonMalformed, "data after the JSON object")
	}
	if w.Kind == nil {
		return ev, refuse(ReasonMalformed, "no kind")
	}
	kind := *w.Kind
	ev.Source, ev.Kind = event.SourceSandbox, kind
	if f, ok := fields[kind]; ok {
		if len(line) > int(cfg.MaxSize) {
			return ev, refuse(ReasonOversize, "%d bytes, at most %d", len(line), cfg.MaxSize)
		}
		set := w.set()
		for _, name := range set {
			if !contains(f.may, name) {
				return ev, refuse(ReasonInvalid, "%s: no field %s", kind, name)
			}
		}
		for _, name := range f.must {
			if !contains(set, name) {
				return ev, refuse(ReasonInvalid, "%s: %s is missing", kind, name)
			}
		}
		return ev, w.fill(&ev)
	}
	limit := int64(-1)
	for _, k := range cfg.Kinds {
		if k.Name == kind {
			limit = int64(k.MaxSize)
		}
	}
	if limit < 0 {
		return ev, refuse(ReasonUnknownKind, "kind %.64q", kind)
	}
	if int64(len(line)) > limit {
		return ev, refuse(ReasonOversize, "%d bytes, kind %s allows %d", len(line), kind, limit)
	}
	if set := w.set(); len(set) != 1 || set[0] != "data" {
		return ev, refuse(ReasonInvalid, "%s: a custom kind carries data and nothing else", kind)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, w.Data); err != nil {
		return ev, refuse(ReasonMalformed, "data: %v", err)
	}
	if !utf8.Valid(buf.Bytes()) {
		return ev, refuse(ReasonInvalid, "data: invalid UTF-8")
	}
	ev.Data = buf.Bytes()
	return ev, nil
}

// set names the fields w sets, kind aside.
func (w *wire) set() []string {
	var out []string
	add := func(name string, ok bool) {
		if ok {
			out = append(out, name)
		}
	}
	add("message", w.Message != nil)
	add("level", w.Level != nil)
	add("pct", w.Pct != nil)
	add("name", w.Name != nil)
	add("value", w.Value != nil)
	add("unit", w.Unit != nil)
	add("status", w.Status != nil)
	add("duration_s", w.DurationS != nil)
	add("path", w.Path != nil)
	add("type", w.Type != nil)
	add("data", w.Data != nil)
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// fill checks w's fields, which Decode found allowed for the kind, and
// copies them into ev.
func (w *wire) fill(ev *event.SandboxEvent) error {
	var errs []string
	text := func(field string, p *string, limit int) string {
		if p == nil {
			return ""
		}
		s := clean(*p)
		if len(s) > limit {
			errs = append(errs, fmt.Sprintf("%s is %d bytes, at most %d", field, len(s), limit))
		}
		return s
	}
	ev.Message = text("message", w.Message, maxMessage)
	ev.Name = text("name", w.Name, maxName)
	ev.Unit = text("unit", w.Unit, maxUnit)
	if w.Level != nil {
		switch *w.Level {
		case "debug", "info", "warn", "error":
			ev.Level = *w.Level
		default:
			errs = append(errs, "level: want debug, info, warn or error")
		}
	}
	if w.Status != nil {
		switch *w.Status {
		case "pass", "fail", "skip":
			ev.Status = *w.Status
		default:
			errs = append(errs, "status: want pass, fail or skip")
		}
	}
	num := func(field string, p *float64, lo, hi float64) *float64 {
		if p == nil {
			return nil
		}
		if math.IsNaN(*p) || *p < lo || *p > hi {
			errs = append(errs, fmt.Sprintf("%s out of range", field))
		}
		v := *p
		return &v
	}
	ev.Pct = num("pct", w.Pct, 0, 100)
	ev.Value = num("value", w.Value, -math.MaxFloat64, math.MaxFloat64)
	ev.DurationS = num("duration_s", w.DurationS, 0, 1e9)
	if w.Path != nil {
		p := *w.Path
		switch {
		case len(p) > maxPath || !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl):
			errs = append(errs, "path: too long or not printable")
		case !path.IsAbs(p):
			errs = append(errs, "path: want an absolute path")
		default:
			ev.Path = path.Clean(p)
		}
	}
	if w.Type != nil {
		if !mediaType.MatchString(*w.Type) {
			errs = append(errs, "type: want a media type like text/html")
		} else {
			ev.MediaType = *w.Type
		}
	}
	if ev.Kind == "artifact" && ev.Name != "" && (!artifactName.MatchString(ev.Name) || strings.Contains("/"+ev.Name+"/", "/../") || strings.Contains("/"+ev.Name+"/", "/./")) {
		errs = append(errs, "name: want path segments of letters, digits, '.', '_' and '-'")
	}
	if ev.Kind == "progress" && ev.Message == "" && ev.Pct == nil {
		errs = append(errs, "progress: want a message or pct")
	}
	if len(errs) > 0 {
		return refuse(ReasonInvalid, "%s: %s", ev.Kind, strings.Join(errs, "; "))
	}
	return nil
}

// clean returns s with invalid UTF-8 and control characters (terminal
// escapes among them) replaced by U+FFFD, and bidirectional overrides
// dropped, so that what a sandbox says cannot restyle what shows it.
func clean(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case unicode.IsControl(r):
			b.WriteRune('\uFFFD')
		case isBidi(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool { return unicode.IsControl(r) || isBidi(r) }

func isBidi(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) || r == 0x200E || r == 0x200F
}

// Filter applies a policy's events section to one sandbox's lines: Decode,
// the rate limit, and the counts of what it refused. It is not safe for
// concurrent use: one goroutine reads a sandbox's channel.
type Filter struct {
	cfg     policy.Events
	sandbox string
	tokens  float64
	last    time.Time
	dropped event.SandboxEventsDropped
}

// NewFilter returns a filter of cfg (defaults filled in here) for sandbox.
func NewFilter(cfg policy.Events, sandbox string) *Filter {
	cfg = cfg.Resolved()
	return &Filter{cfg: cfg, sandbox: sandbox, tokens: float64(cfg.Burst), dropped: event.SandboxEventsDropped{Sandbox: sandbox}}
}

// Config is the resolved section the filter applies.
func (f *Filter) Config() policy.Events { return f.cfg }

// Accept checks a line that arrived at now. A refused line is counted and
// its *RefusedError returned.
func (f *Filter) Accept(line []byte, now time.Time) (event.SandboxEvent, error) {
	ev, err := f.accept(line, now)
	if err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			f.count(re.Reason)
		}
		return ev, err
	}
	ev.Sandbox = f.sandbox
	return ev, nil
}

func (f *Filter) accept(line []byte, now time.Time) (event.SandboxEvent, error) {
	if f.cfg.Off {
		return event.SandboxEvent{}, refuse(ReasonOff, "the policy turns sandbox events off")
	}
	if !f.last.IsZero() {
		f.tokens = min(float64(f.cfg.Burst), f.tokens+now.Sub(f.last).Seconds()*float64(f.cfg.Rate))
	}
	f.last = now
	if f.tokens < 1 {
		return event.SandboxEvent{}, refuse(ReasonRate, "more than %d events a second", f.cfg.Rate)
	}
	f.tokens--
	return Decode(line, f.cfg)
}

func (f *Filter) count(reason string) {
	d := &f.dropped
	switch reason {
	case ReasonMalformed:
		d.Malformed++
	case ReasonUnknownKind:
		d.UnknownKind++
	case ReasonOversize:
		d.Oversize++
	case ReasonRate:
		d.Rate++
	default:
		d.Invalid++
	}
}

// RefuseArtifact counts a declared artifact the host did not store.
func (f *Filter) RefuseArtifact() { f.dropped.Artifacts++ }

// Executor takes the executor's counts, which replace the last ones (they
// count since the sandbox started).
func (f *Filter) Executor(oversize, rate, queue, conns int64) {
	f.dropped.ExecOversize, f.dropped.ExecRate, f.dropped.ExecQueue, f.dropped.ExecConns = oversize, rate, queue, conns
}

// Dropped returns the counts so far.
func (f *Filter) Dropped() event.SandboxEventsDropped { return f.dropped }
