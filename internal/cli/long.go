package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/template"
)

// CreateCmd is `airlock sandbox create`.
type CreateCmd struct {
	sandboxcli.SpecFlags
	EgressFlags
	ImageFlag
	TemplateFlag
	TTL time.Duration `help:"Destroy the sandbox after this long." default:"1h"`
}

// superviseArgs is what create hands the supervisor.
type superviseArgs struct {
	Spec sandbox.Spec `json:"spec"`
	// Network is the egress policy when the supervisor runs the proxy.
	Network *policy.Network `json:"network,omitempty"`
	Egress  EgressFlags     `json:"egress"`
	// Template, when set, is the template the sandbox starts from: its
	// start command and readiness check run before the id is reported.
	Template *template.Template `json:"template,omitempty"`
	// Builtin names the built-in template (host.BuiltinTemplate) Template is:
	// the supervisor makes it again, with the files that JSON does not
	// carry.
	Builtin string `json:"builtin,omitempty"`
}

// Run starts a supervisor in the background and prints the sandbox id once
// the sandbox is up.
func (c *CreateCmd) Run(env *Env) error {
	var spec sandbox.Spec
	var netPolicy *policy.Network
	var tmpl *template.Template
	var builtin string
	if c.Template != "" {
		u, err := c.TemplateFlag.load(env, &c.EgressFlags, c.Image)
		if err != nil {
			return err
		}
		if spec, netPolicy, _, err = u.spec(env, &c.SpecFlags, &c.EgressFlags); err != nil {
			return err
		}
		tmpl = u.t
		if u.v.Version == 0 {
			builtin = u.v.Name
		}
	} else {
		var doc *policy.Document
		var err error
		spec, netPolicy, doc, err = sandboxSpec(&c.SpecFlags, &c.EgressFlags)
		if err != nil {
			return usageError{Err: err}
		}
		if _, err := c.ImageFlag.apply(env, &spec, doc); err != nil {
			return err
		}
	}
	if c.TTL <= 0 {
		return usageError{Err: errors.New("--ttl must be positive")}
	}
	spec.TTL = c.TTL
	env.GC()
	if netPolicy != nil {
		spec.ID = sandbox.NewID()
	}
	arg, err := json.Marshal(superviseArgs{Spec: spec, Network: netPolicy, Egress: c.EgressFlags, Template: tmpl, Builtin: builtin})
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(env.Self, "sandbox", "supervise")
	cmd.Env = []string{"AIRLOCK_HOME=" + env.Home, "AIRLOCK_EXEC=" + env.Executor}
	if r := env.getenv("AIRLOCK_RUNSC"); r != "" {
		// The gvisor runtime's runsc (docs/gvisor.md): the supervisor's
		// sandbox runs on the runsc this command would have used.
		cmd.Env = append(cmd.Env, "AIRLOCK_RUNSC="+r)
	}
	cmd.Stdin = strings.NewReader(string(arg))
	cmd.ExtraFiles = []*os.File{w}
	// Its own session: the supervisor outlives this command and the
	// terminal. It holds the sandbox until rm or the TTL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		r.Close()
		return fmt.Errorf("start supervisor: %w", err)
	}
	w.Close()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	r.Close()
	_ = cmd.Process.Release()
	line = strings.TrimSpace(line)
	if id, ok := strings.CutPrefix(line, "ok "); ok {
		fmt.Fprintln(env.Stdout, id)
		return nil
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return errors.New(msg)
	}
	if rerr != nil {
		return fmt.Errorf("supervisor exited before the sandbox was ready: %w", rerr)
	}
	return fmt.Errorf("supervisor answered %q, neither ok nor error", line)
}

// SuperviseCmd holds a sandbox for create. It reports "ok ID" or
// "error MSG" on fd 3 and then serves until rm or the TTL.
type SuperviseCmd struct{}

// Run is the supervisor's body.
func (SuperviseCmd) Run(env *Env) error {
	report := os.NewFile(3, "report")
	reported := false
	fail := func(err error) error {
		fmt.Fprintf(report, "error %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		report.Close()
		return err
	}
	var args superviseArgs
	if err := json.NewDecoder(env.Stdin).Decode(&args); err != nil {
		return fail(err)
	}
	// One sandbox for the life of this process, started at once: a
	// spawner would be one more process per sandbox for no gain.
	env.Spawner = false
	b, err := env.Backend()
	if err != nil {
		return fail(err)
	}
	ctx, cancel := signal.NotifyContext(env.Ctx, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	defer cancel()
	if args.Network != nil {
		if err := args.Network.Validate(); err != nil {
			return fail(err)
		}
		eg, err := startEgress(ctx, env, args.Spec.ID, args.Network, &args.Egress)
		if err != nil {
			return fail(err)
		}
		defer eg.close(nil)
		eg.Apply(&args.Spec)
	}
	if t, ok := host.BuiltinTemplate(args.Builtin); ok {
		args.Template = t
	}
	var prepare sandboxcli.Prepare
	if args.Template != nil {
		prepare = func(ctx context.Context, sb sandbox.Sandbox) error { return template.Prepare(ctx, sb, args.Template) }
	}
	env.EventLog = host.OpenSandboxEvents
	err = sandboxcli.Supervise(ctx, &env.Env, b, args.Spec, prepare, func(id string) {
		fmt.Fprintf(report, "ok %s\n", id)
		report.Close()
		reported = true
	})
	if err != nil && !reported {
		return fail(err)
	}
	return err
}
