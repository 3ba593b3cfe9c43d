package template

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// Bounds of a template document.
const (
	// MaxSize is the largest template document, in bytes.
	MaxSize = 64 << 10
	// MaxPool is the most sandboxes a template may keep warm.
	MaxPool = 32
	// MaxReadyTimeout is the longest readiness timeout.
	MaxReadyTimeout = 10 * time.Minute
	// DefaultReadyTimeout is the readiness timeout a document that gives
	// none gets.
	DefaultReadyTimeout = 30 * time.Second
	// maxArgs and maxArg bound a command's arguments; maxEnv the
	// environment's entries.
	maxArgs = 256
	maxArg  = 8 << 10
	maxEnv  = 256
	maxText = 512
)

// Template is one template document, parsed and valid.
type Template struct {
	// Image is the image the sandbox's root is made of: NAME[:TAG] or
	// NAME@sha256:HEX in a document given; a stored version records it
	// by digest (the host resolves it when the version is created).
	Image string `yaml:"image" json:"image"`
	// Start, when set, runs in the background once the sandbox is made,
	// for the sandbox's life (a server the sandbox's users talk to, say).
	// A document may write it as one string, which /bin/sh -c runs.
	Start Command `yaml:"start,omitempty" json:"start,omitempty"`
	// Ready, when set, is run until it exits 0 before the sandbox is
	// handed over.
	Ready *Ready `yaml:"ready,omitempty" json:"ready,omitempty"`
	// Env is added to the image's environment (a variable here wins).
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Workdir is the commands' default working directory (absolute);
	// empty keeps the image's.
	Workdir string `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	// User is the commands' default user (a name of the image's
	// /etc/passwd or a uid); empty keeps the image's.
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	// Limits are the sandbox's default limits, in the shape of a policy's
	// sandbox.limits; a zero field keeps the policy's.
	Limits Limits `yaml:"limits,omitempty" json:"limits,omitzero"`
	// Policy names the tenant's stored policy the sandbox (its egress,
	// its budgets...) is held to; empty means the default policy.
	Policy string `yaml:"policy,omitempty" json:"policy,omitempty"`
	// Runtime, when set, is what isolates the sandbox (native or gvisor),
	// in place of its policy's sandbox.runtime; a --runtime flag wins.
	Runtime string `yaml:"runtime,omitempty" json:"runtime,omitempty"`
	// Pool is how many sandboxes of the template to keep made and ready
	// for the tenant (E2B), 0 to MaxPool.
	Pool int `yaml:"pool,omitempty" json:"pool,omitempty"`
	// Files are written into the sandbox before Start runs. Only a
	// built-in template has any (airlock's code interpreter server, the
	// program its start command runs); a document cannot name any.
	Files []File `yaml:"-" json:"-"`
}

// File is one file a built-in template puts into its sandboxes.
type File struct {
	// Path is absolute, inside the sandbox.
	Path string
	Data []byte
	Mode fs.FileMode
}

// Command is a command's argv.
type Command []string

// UnmarshalYAML reads a list of strings, or one string (any scalar but
// null, as written), which becomes /bin/sh -c STRING.
func (c *Command) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		*c = Command{"/bin/sh", "-c", n.Value}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: want a command: a string, or a list of strings", n.Line)
	}
	argv := []string{}
	for _, a := range n.Content {
		if a.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: want a command: a string, or a list of strings", a.Line)
		}
		argv = append(argv, a.Value)
	}
	*c = argv
	return nil
}

// Ready is a readiness check.
type Ready struct {
	// Command is run (again and again, Interval apart) until it exits 0.
	Command Command `yaml:"command" json:"command"`
	// Timeout bounds the wait for a pass (DefaultReadyTimeout when
	// zero in a document; at most MaxReadyTimeout).
	Timeout policy.Duration `yaml:"timeout" json:"timeout_ns"`
}

// Limits are a template's default sandbox limits: policy.Limits' fields,
// each zero when the template leaves it to the policy.
type Limits struct {
	Memory         policy.Size     `yaml:"memory,omitempty" json:"memory,omitempty"`
	Pids           int64           `yaml:"pids,omitempty" json:"pids,omitempty"`
	CPUs           float64         `yaml:"cpus,omitempty" json:"cpus,omitempty"`
	Disk           policy.Size     `yaml:"disk,omitempty" json:"disk,omitempty"`
	CommandTimeout policy.Duration `yaml:"command_timeout,omitempty" json:"command_timeout,omitempty"`
	TTL            policy.Duration `yaml:"ttl,omitempty" json:"ttl,omitempty"`
	Output         policy.Size     `yaml:"output,omitempty" json:"output,omitempty"`
}

// ApplySandbox sets what t says of its sandbox over its policy's: each
// limit it gives (not zero) and its runtime, if any.
func (t *Template) ApplySandbox(sb *policy.Sandbox) {
	t.Limits.Apply(&sb.Limits)
	if t.Runtime != "" {
		sb.Runtime = t.Runtime
	}
}

// Apply sets each limit l gives (not zero) over a policy's.
func (l Limits) Apply(pl *policy.Limits) {
	if l.Memory != 0 {
		pl.Memory = l.Memory
	}
	if l.Pids != 0 {
		pl.Pids = l.Pids
	}
	if l.CPUs != 0 {
		pl.CPUs = l.CPUs
	}
	if l.Disk != 0 {
		pl.Disk = l.Disk
	}
	if l.CommandTimeout != 0 {
		pl.CommandTimeout = l.CommandTimeout
	}
	if l.TTL != 0 {
		pl.TTL = l.TTL
	}
	if l.Output != 0 {
		pl.Output = l.Output
	}
}

// rawLimits is Limits as a document writes it: sizes and durations are
// read as text, then parsed as the policy package parses them.
type rawLimits struct {
	Memory         string  `yaml:"memory"`
	Pids           int64   `yaml:"pids"`
	CPUs           float64 `yaml:"cpus"`
	Disk           string  `yaml:"disk"`
	CommandTimeout string  `yaml:"command_timeout"`
	TTL            string  `yaml:"ttl"`
	Output         string  `yaml:"output"`
}

type rawReady struct {
	Command Command `yaml:"command"`
	Timeout string  `yaml:"timeout"`
}

type rawTemplate struct {
	Image   string            `yaml:"image"`
	Start   Command           `yaml:"start"`
	Ready   *rawReady         `yaml:"ready"`
	Env     map[string]string `yaml:"env"`
	Workdir string            `yaml:"workdir"`
	User    string            `yaml:"user"`
	Limits  rawLimits         `yaml:"limits"`
	Policy  string            `yaml:"policy"`
	Runtime string            `yaml:"runtime"`
	Pool    int               `yaml:"pool"`
}

// Parse reads a template document and validates it (Validate), reporting
// every problem it finds, joined. Unknown keys, a second YAML document,
// an empty one and one over MaxSize are refused.
func Parse(data []byte) (*Template, error) {
	t, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return t, nil
}

// Decode reads a template document as Parse does but does not validate
// it: for a caller that completes it first (command-line flags).
func Decode(data []byte) (*Template, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("template: document is %d bytes, limit is %d", len(data), MaxSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawTemplate
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("template: empty document")
		}
		return nil, fmt.Errorf("template: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("template: more than one YAML document")
	}
	t := &Template{
		Image: raw.Image, Start: raw.Start, Env: raw.Env, Workdir: raw.Workdir, User: raw.User,
		Policy: raw.Policy, Runtime: raw.Runtime, Pool: raw.Pool,
		Limits: Limits{Pids: raw.Limits.Pids, CPUs: raw.Limits.CPUs},
	}
	var errs []error
	size := func(field, s string, dst *policy.Size) {
		if s == "" {
			return
		}
		v, err := policy.ParseSize(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		*dst = v
	}
	duration := func(field, s string, dst *policy.Duration) {
		if s == "" {
			return
		}
		v, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration: write a number with a unit, like 90s or 10m", field, clip(s)))
		}
		*dst = policy.Duration(v)
	}
	size("limits.memory", raw.Limits.Memory, &t.Limits.Memory)
	size("limits.disk", raw.Limits.Disk, &t.Limits.Disk)
	size("limits.output", raw.Limits.Output, &t.Limits.Output)
	duration("limits.command_timeout", raw.Limits.CommandTimeout, &t.Limits.CommandTimeout)
	duration("limits.ttl", raw.Limits.TTL, &t.Limits.TTL)
	if raw.Ready != nil {
		t.Ready = &Ready{Command: raw.Ready.Command}
		duration("ready.timeout", raw.Ready.Timeout, &t.Ready.Timeout)
		if t.Ready.Timeout == 0 && raw.Ready.Timeout == "" {
			t.Ready.Timeout = policy.Duration(DefaultReadyTimeout)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("template: %w", errors.Join(errs...))
	}
	return t, nil
}

// Validate reports every problem of t, joined: an image missing or not
// one line of text; a start or readiness command empty, with an empty
// program, or too long; a readiness timeout not in (0, MaxReadyTimeout];
// an environment variable whose name is not [A-Za-z_][A-Za-z0-9_]*, that
// the sandbox sets itself, or whose value holds a NUL; a working
// directory that is not an absolute clean path; a user that is not a
// name or uid; a negative or non-finite limit; a policy name the store
// would refuse; a pool not in 0..MaxPool.
func (t *Template) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case t.Image == "":
		bad("image: missing: name the image the sandbox's root is made of (airlock image ls)")
	case !line(t.Image) || strings.ContainsAny(t.Image, " \t"):
		bad("image %q: want one reference like python:3 or NAME@sha256:HEX", clip(t.Image))
	}
	if !sandbox.ValidRuntime(t.Runtime) {
		bad("runtime %q: want native or gvisor", clip(t.Runtime))
	}
	if t.Start != nil {
		if err := t.Start.check(); err != nil {
			bad("start: %v", err)
		}
	}
	if t.Ready != nil {
		if err := t.Ready.Command.check(); err != nil {
			bad("ready.command: %v", err)
		}
		if d := time.Duration(t.Ready.Timeout); d <= 0 || d > MaxReadyTimeout {
			bad("ready.timeout %s: want more than 0 and at most %s", d, MaxReadyTimeout)
		}
	}
	if len(t.Env) > maxEnv {
		bad("env: %d variables, limit %d", len(t.Env), maxEnv)
	}
	for _, k := range sortedKeys(t.Env) {
		switch {
		case !envName(k):
			bad("env %q: a name is a letter or '_', then letters, digits and '_'", clip(k))
		case sandbox.OwnEnv(k):
			bad("env %s: the sandbox sets it itself", k)
		case strings.IndexByte(t.Env[k], 0) >= 0 || len(t.Env[k]) > maxArg:
			bad("env %s: the value holds a NUL or is over %d bytes", k, maxArg)
		}
	}
	if t.Workdir != "" && (!line(t.Workdir) || !path.IsAbs(t.Workdir) || path.Clean(t.Workdir) != t.Workdir) {
		bad("workdir %q: want an absolute, clean path like /workspace", clip(t.Workdir))
	}
	if t.User != "" && !userName(t.User) {
		bad("user %q: want a user name of the image or a uid", clip(t.User))
	}
	l := t.Limits
	if l.Memory < 0 || l.Disk < 0 || l.Output < 0 || l.Pids < 0 || l.CommandTimeout < 0 || l.TTL < 0 {
		bad("limits: a limit is negative")
	}
	if l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		bad("limits.cpus %v: want a number of CPUs, 0 or more", l.CPUs)
	}
	if t.Policy != "" {
		if store.ValidatePolicyName(t.Policy) != nil {
			bad("policy %q: want the name of a stored policy (airlock policy ls)", clip(t.Policy))
		}
	}
	if t.Pool < 0 || t.Pool > MaxPool {
		bad("pool %d: want 0 to %d sandboxes", t.Pool, MaxPool)
	}
	return errors.Join(errs...)
}

func (c Command) check() error {
	switch {
	case len(c) == 0 || c[0] == "":
		return errors.New("empty: give a program and its arguments, or one shell command string")
	case len(c) > maxArgs:
		return fmt.Errorf("%d arguments, limit %d", len(c), maxArgs)
	}
	for _, a := range c {
		if strings.IndexByte(a, 0) >= 0 || len(a) > maxArg || !utf8.ValidString(a) {
			return fmt.Errorf("an argument holds a NUL, is not UTF-8 or is over %d bytes", maxArg)
		}
	}
	return nil
}

// Marshal writes t in the canonical form: YAML, keys in the order of
// Template's fields, zero fields left out, sizes and durations in the
// policy package's shortest forms. Two templates that mean the same have
// the same bytes.
func Marshal(t *Template) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(t); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return b.Bytes(), nil
}

// EnvList is t.Env as KEY=VALUE entries, sorted by key.
func (t *Template) EnvList() []string {
	var out []string
	for _, k := range sortedKeys(t.Env) {
		out = append(out, k+"="+t.Env[k])
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// line reports whether s is printable UTF-8 text of at most maxText bytes
// without line breaks.
func line(s string) bool {
	if len(s) > maxText || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func envName(k string) bool {
	if k == "" || len(k) > 256 || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// userName reports whether u is a uid or a POSIX-ish user name.
func userName(u string) bool {
	if _, err := strconv.ParseUint(u, 10, 32); err == nil {
		return true
	}
	if len(u) > 32 || u == "" || u[0] == '-' {
		return false
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		if !(c == '_' || c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
