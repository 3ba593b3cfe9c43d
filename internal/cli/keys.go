package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// KeysCmd is `airlock keys`.
type KeysCmd struct {
	Create KeysCreateCmd `cmd:"" help:"Create an API key for a tenant and print it, once."`
	Ls     KeysLsCmd     `cmd:"" help:"List API keys: id, name, scopes, created, last used, revoked (never the key)."`
	Revoke KeysRevokeCmd `cmd:"" help:"Revoke an API key: it stops working at once."`
}

// KeysCreateCmd is `airlock keys create`.
type KeysCreateCmd struct {
	Tenant string   `required:"" help:"The tenant the key acts for (airlock tenants create makes one)." placeholder:"TENANT"`
	Name   string   `required:"" help:"A label for people: what the key is for (at most 100 printable characters)." placeholder:"LABEL"`
	Scope  []string `default:"runs:read,runs:write,approvals" help:"What the key may do (repeatable, or comma-separated): runs:write, runs:read, approvals, secrets:write, sandboxes, admin (all of them)." placeholder:"SCOPE"`
	E2B    bool     `name:"e2b" help:"Make the key e2b_<hex>, the shape the E2B SDKs accept, instead of airlock_<hex>."`
}

// Run creates the key, prints it on stdout and says on stderr that it is
// not shown again. Bad input exits 2 and stores nothing.
func (c *KeysCreateCmd) Run(env *Env) error {
	if host.ValidTenantName(c.Tenant) != nil {
		return tenantNameError(c.Tenant)
	}
	if err := host.ValidKeyName(c.Name); err != nil {
		return usageError{Err: fmt.Errorf("--name: %d characters at most, printable (no newlines or control characters)", host.MaxKeyNameLen)}
	}
	var scopes []string
	for _, s := range c.Scope {
		if !slices.Contains(host.Scopes, s) {
			return usageError{Err: fmt.Errorf("--scope: unknown scope %q: want one of %s", clip(s, 40), strings.Join(host.Scopes, ", "))}
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	if len(scopes) == 0 {
		return usageError{Err: fmt.Errorf("--scope: give at least one of %s", strings.Join(host.Scopes, ", "))}
	}
	l, err := openTenants(env)
	if err != nil {
		return err
	}
	defer l.close()
	key, meta, err := l.h.CreateKey(env.Ctx, c.Tenant, c.Name, scopes, c.E2B)
	var nt *host.NoTenantError
	if errors.As(err, &nt) {
		return usageError{Err: nt}
	}
	if err != nil {
		return hostError(err)
	}
	fmt.Fprintln(env.Stdout, key)
	fmt.Fprintf(env.Stderr, "airlock: created %s for tenant %s (%s); the key is shown only this once: store it now\n",
		meta.ID, meta.Tenant, strings.Join(meta.Scopes, ", "))
	return nil
}

// KeysLsCmd is `airlock keys ls`.
type KeysLsCmd struct {
	Tenant string `help:"Only this tenant's keys (default: every tenant's)." placeholder:"TENANT"`
	JSON   bool   `name:"json" help:"One JSON object per key: id, tenant, name, scopes, created, last_used, revoked (null when never)."`
}

// Run lists the keys, by tenant, oldest first.
func (c *KeysLsCmd) Run(env *Env) error {
	if c.Tenant != "" && host.ValidTenantName(c.Tenant) != nil {
		return tenantNameError(c.Tenant)
	}
	l, err := openTenants(env)
	if err != nil {
		return err
	}
	defer l.close()
	keys, err := l.h.Keys(env.Ctx, c.Tenant)
	var nt *host.NoTenantError
	if errors.As(err, &nt) {
		return usageError{Err: nt}
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, keys...)
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Local().Format(timeLayout)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tNAME\tSCOPES\tCREATED\tLAST USED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, orDash(clip(k.Name, 40)), strings.Join(k.Scopes, ","),
			when(&k.Created), when(k.LastUsed), when(k.Revoked))
	}
	return tw.Flush()
}

// KeysRevokeCmd is `airlock keys revoke ID`.
type KeysRevokeCmd struct {
	ID     string `arg:"" help:"The key's id (key_…, as airlock keys ls shows it; not the key itself)." placeholder:"ID"`
	Tenant string `required:"" help:"The key's tenant." placeholder:"TENANT"`
}

// Run revokes the key. A key that is not the tenant's exits 1, like a
// missing secret; revoking a revoked key succeeds.
func (c *KeysRevokeCmd) Run(env *Env) error {
	if host.ValidTenantName(c.Tenant) != nil {
		return tenantNameError(c.Tenant)
	}
	if host.ValidKeyID(c.ID) != nil {
		if host.ParsesAsKey(c.ID) {
			// Never echo a key back, not even in an error.
			return usageError{Err: errors.New("that is an API key, not its id: give the key_… id airlock keys ls shows")}
		}
		return usageError{Err: fmt.Errorf("key id %q: want %s and 16 lowercase hex digits (airlock keys ls shows them)", clip(c.ID, 40), host.APIKeyIDPrefix)}
	}
	l, err := openTenants(env)
	if err != nil {
		return err
	}
	defer l.close()
	err = l.h.RevokeKey(env.Ctx, c.Tenant, c.ID)
	if errors.Is(err, host.ErrNoKey) {
		return reportedError{Err: fmt.Errorf("tenant %s has no key %s (airlock keys ls --tenant %s lists them)", c.Tenant, c.ID, c.Tenant), Code: 1}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "revoked %s of tenant %s\n", c.ID, c.Tenant)
	return nil
}
