package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/host"
)

// MCPCmd is `airlock mcp`: an MCP server on stdin and stdout for a local
// agent, whose sandboxes are this host's; with AIRLOCK_URL and
// AIRLOCK_API_KEY, a relay to that server's /mcp instead.
type MCPCmd struct {
	Policy   string `help:"Policy of the sandboxes created without one: a policy file or a stored policy's name (default: the built-in default policy). create_sandbox may name any stored policy." placeholder:"FILE|NAME"`
	AuditLog string `help:"Append the session's audit records (JSON lines, one per call) to this file (default $AIRLOCK_HOME/audit/mcp-TIME-PID.jsonl: one file per session)." placeholder:"FILE"`
	KeyFile  string `name:"key-file" env:"AIRLOCK_SECRET_KEY_FILE" help:"Secret store key file for credentials a policy binds (default $AIRLOCK_HOME/secrets/key)." placeholder:"PATH"`
}

// Run serves one MCP session over stdio until the client closes it; the
// session's sandboxes are destroyed then.
func (c *MCPCmd) Run(env *Env) error {
	url, key := env.getenv("AIRLOCK_URL"), env.getenv("AIRLOCK_API_KEY")
	switch {
	case url != "" && key != "":
		if c.Policy != "" || c.AuditLog != "" {
			return usageError{Err: errors.New("--policy and --audit-log are this host's: against a server (AIRLOCK_URL), its stored policies and audit log apply")}
		}
		fmt.Fprintf(env.Stderr, "airlock mcp: relaying to %s/mcp\n", url)
		t := &sdk.IOTransport{Reader: io.NopCloser(env.Stdin), Writer: nopWriteCloser{env.Stdout}}
		if err := host.MCPRelay(env.Ctx, t, url, key); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
		return nil
	case url != "" || key != "":
		return usageError{Err: errors.New("set both AIRLOCK_URL and AIRLOCK_API_KEY to relay to a server's /mcp, neither to serve this host's sandboxes")}
	}
	o := host.MCPOptions{TrustTenantPolicies: true} // the local tenant is the host's owner
	var rp runPolicy
	if c.Policy != "" {
		var err error
		if rp, err = readRunPolicy(c.Policy, ""); err != nil {
			return usageError{Err: err}
		}
	}
	l, err := openLocal(env, hostOptions{keyFile: c.KeyFile})
	if err != nil {
		return err
	}
	defer l.close()
	if rp.ref != "" {
		if rp, err = rp.loadStored(env.Ctx, &localBackend{env: env, h: l}); err != nil {
			return err
		}
	}
	if rp.parsed != nil {
		o.Default, o.DefaultName = rp.parsed, c.Policy
	}
	audit, path, err := openMCPAudit(env, c.AuditLog)
	if err != nil {
		return err
	}
	defer audit.Close()
	o.Audit = audit
	srv, err := l.h.MCPServer(o)
	if err != nil {
		return err
	}
	defer srv.Close(context.WithoutCancel(env.Ctx))
	fmt.Fprintf(env.Stderr, "airlock mcp: serving this host's sandboxes on stdio; audit log %s\n", path)
	t := &sdk.IOTransport{Reader: io.NopCloser(env.Stdin), Writer: nopWriteCloser{env.Stdout}}
	return srv.ServeStdio(env.Ctx, t, host.LocalPrincipal("uid:"+strconv.Itoa(os.Getuid())))
}

// openMCPAudit opens the audit log at path, or a new one of the session
// under $AIRLOCK_HOME/audit.
func openMCPAudit(env *Env, path string) (*host.AuditLog, string, error) {
	if path == "" {
		path = filepath.Join(env.Home, "audit", fmt.Sprintf("mcp-%s-%d.jsonl", time.Now().UTC().Format("20060102T150405"), os.Getpid()))
	}
	f, err := host.OpenAuditLog(path)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

// nopWriteCloser gives the SDK's transport the command's stdout, which is
// not the transport's to close.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
