package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// SecretsCmd is `airlock secrets`: the host's encrypted secret store in
// $AIRLOCK_HOME/secrets, or, with AIRLOCK_URL and AIRLOCK_API_KEY set, the
// API key's tenant's secrets on that server. No subcommand ever prints a
// value.
type SecretsCmd struct {
	Set SecretsSetCmd `cmd:"" help:"Store a secret; the value is read from stdin, never from an argument."`
	Ls  SecretsLsCmd  `cmd:"" help:"List secrets: names, creation time and bound hosts, never values."`
	Rm  SecretsRmCmd  `cmd:"" help:"Delete a secret (exit status 1 if there is none)."`
}

// SecretStoreFlags choose the store's key and tenant.
type SecretStoreFlags struct {
	KeyFile string `name:"key-file" env:"AIRLOCK_SECRET_KEY_FILE" help:"Key file (default $AIRLOCK_HOME/secrets/key, created with mode 0600 on first use; a server uses its own)." placeholder:"PATH"`
	Tenant  string `help:"Tenant that owns the secrets (default: ${local_tenant}, the command line's; against a server, the API key's tenant, the only one it may name)." placeholder:"NAME"`
}

// openSecrets opens the backend of the secrets commands.
func (f *SecretStoreFlags) openSecrets(env *Env) (backend, error) {
	if f.Tenant != "" {
		if err := host.ValidSecretName(f.Tenant); err != nil {
			return nil, usageError{Err: fmt.Errorf("--tenant: %w", err)}
		}
	}
	return openBackend(env, hostOptions{readOnly: true, keyFile: f.KeyFile})
}

// SecretsSetCmd is `airlock secrets set NAME [--host PATTERN ...]`.
type SecretsSetCmd struct {
	SecretStoreFlags
	Name string   `arg:"" help:"Secret name: letters, digits, '_', '.', '-'."`
	Host []string `name:"host" help:"Host pattern the secret may be sent to: name, *.suffix or IP (repeatable; default: wherever policy binds it)." placeholder:"PATTERN"`
	// Extra catches a value given as an argument, to refuse it without
	// echoing it (kong's own "unexpected argument" error would print it).
	Extra []string `arg:"" optional:"" help:"Refused: the value is read from stdin, never from an argument."`
}

// Run reads the value from stdin and stores it.
func (c *SecretsSetCmd) Run(env *Env) error {
	if len(c.Extra) > 0 {
		return usageError{Err: errors.New("secrets set takes only a NAME: the value is read from stdin, so it cannot land in shell history or ps")}
	}
	if err := host.ValidSecretName(c.Name); err != nil {
		return usageError{Err: err}
	}
	hosts, err := host.NormalizeHosts(c.Host)
	if err != nil {
		return usageError{Err: err}
	}
	b, err := c.openSecrets(env)
	if err != nil {
		return err
	}
	defer b.close()
	val, err := readSecretValue(env, c.Name)
	if err != nil {
		return err
	}
	hosts, err = b.setSecret(env.Ctx, &c.SecretStoreFlags, c.Name, val, hosts)
	clear(val)
	if err != nil {
		return err
	}
	if len(hosts) > 0 {
		fmt.Fprintf(env.Stdout, "secret %s set, bound to %s\n", c.Name, strings.Join(hosts, ", "))
	} else {
		fmt.Fprintf(env.Stdout, "secret %s set\n", c.Name)
	}
	return nil
}

// readSecretValue reads the value from stdin: without echo from a
// terminal, else the whole stream. Exactly one trailing newline ("\n" or
// "\r\n") is stripped, so `echo tok | airlock secrets set x` stores "tok".
func readSecretValue(env *Env, name string) ([]byte, error) {
	var b []byte
	var err error
	if f, ok := env.Stdin.(*os.File); ok && isTerminal(f) {
		fmt.Fprintf(env.Stderr, "value for %s (not echoed): ", name)
		b, err = readNoEcho(f)
		fmt.Fprintln(env.Stderr)
	} else if env.Stdin != nil {
		b, err = io.ReadAll(io.LimitReader(env.Stdin, host.MaxSecretSize+3))
	}
	if err != nil {
		clear(b)
		return nil, fmt.Errorf("read secret value from stdin: %w", err)
	}
	return checkSecretValue(b)
}

// checkSecretValue strips one trailing newline and bounds the value.
func checkSecretValue(b []byte) ([]byte, error) {
	if bytes.HasSuffix(b, []byte("\r\n")) {
		b = b[:len(b)-2]
	} else if bytes.HasSuffix(b, []byte("\n")) {
		b = b[:len(b)-1]
	}
	switch {
	case len(b) == 0:
		return nil, usageError{Err: errors.New("empty secret value on stdin (pipe the value in: printf %s \"$TOKEN\" | airlock secrets set NAME)")}
	case len(b) > host.MaxSecretSize:
		clear(b)
		return nil, usageError{Err: fmt.Errorf("secret value larger than %d bytes", host.MaxSecretSize)}
	}
	return b, nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readNoEcho reads one line from the terminal f with echo turned off,
// restoring the terminal afterwards, also when interrupted.
func readNoEcho(f *os.File) ([]byte, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ECHONL | unix.ICANON
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, err
	}
	restore := func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
	defer restore()

	// An interrupt while echo is off must not leave the terminal silent.
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer func() {
		signal.Stop(sigs)
		close(done)
	}()
	go func() {
		select {
		case s := <-sigs:
			restore()
			signal.Reset(s)
			_ = unix.Kill(os.Getpid(), s.(unix.Signal))
		case <-done:
		}
	}()

	var line []byte
	buf := make([]byte, 1)
	for len(line) <= host.MaxSecretSize+1 {
		n, err := f.Read(buf)
		if n == 1 {
			line = append(line, buf[0])
			if buf[0] == '\n' {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			clear(line)
			return nil, err
		}
	}
	return line, nil
}

// SecretsLsCmd is `airlock secrets ls [--json]`.
type SecretsLsCmd struct {
	SecretStoreFlags
	JSON bool `name:"json" help:"One JSON object per secret: name, created, updated, hosts."`
}

// Run lists the tenant's secrets.
func (c *SecretsLsCmd) Run(env *Env) error {
	b, err := c.openSecrets(env)
	if err != nil {
		return err
	}
	defer b.close()
	infos, err := b.listSecrets(env.Ctx, &c.SecretStoreFlags)
	if err != nil {
		return err
	}
	if c.JSON {
		out := make([]api.Secret, 0, len(infos))
		for _, i := range infos {
			out = append(out, api.Secret{Name: i.Name, Created: i.Created.UTC(), Updated: i.Updated.UTC(), Hosts: append([]string{}, i.Hosts...)})
		}
		return sandboxcli.WriteJSON(env.Stdout, out...)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tHOSTS")
	for _, i := range infos {
		hosts := "-"
		if len(i.Hosts) > 0 {
			hosts = strings.Join(i.Hosts, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", i.Name, i.Created.UTC().Format(time.RFC3339), hosts)
	}
	return tw.Flush()
}

// SecretsRmCmd is `airlock secrets rm NAME`.
type SecretsRmCmd struct {
	SecretStoreFlags
	Name string `arg:"" help:"Secret name."`
}

// Run deletes the secret. A missing secret is exit status 1 with a message,
// like rm(1), so scripts can tell it from airlock failing (125).
func (c *SecretsRmCmd) Run(env *Env) error {
	if err := host.ValidSecretName(c.Name); err != nil {
		return usageError{Err: err}
	}
	b, err := c.openSecrets(env)
	if err != nil {
		return err
	}
	defer b.close()
	err = b.deleteSecret(env.Ctx, &c.SecretStoreFlags, c.Name)
	if errors.Is(err, host.ErrNoSecret) {
		fmt.Fprintf(env.Stderr, "airlock: secret %s not found\n", c.Name)
		return exitCode(1)
	}
	return err
}
