package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// TenantsCmd is `airlock tenants`.
type TenantsCmd struct {
	Create TenantsCreateCmd `cmd:"" help:"Create a tenant: the owner of runs, secrets, credits, policies and API keys."`
	Ls     TenantsLsCmd     `cmd:"" help:"List the tenants."`
	Delete TenantsDeleteCmd `cmd:"" help:"Delete a tenant and everything of it for good (asks first; an audit record stays)."`
}

// openTenants opens the host of the tenant and key commands: no sandbox,
// and only the run store of what it has.
func openTenants(env *Env) (*local, error) {
	return openLocal(env, hostOptions{readOnly: true})
}

// tenantNameError is the usage error of a malformed tenant name.
func tenantNameError(name string) error {
	return usageError{Err: fmt.Errorf("tenant name %q: want 1 to %d of a-z, 0-9 and '-', starting with a letter or digit",
		name, host.MaxTenantNameLen)}
}

// TenantsCreateCmd is `airlock tenants create NAME`.
type TenantsCreateCmd struct {
	Name string `arg:"" help:"Tenant name: 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit (the command line's own runs belong to ${local_tenant})." placeholder:"NAME"`
}

// Run creates the tenant. A name already taken exits 1, so a script can
// tell it from bad input (2) and from airlock failing (125).
func (c *TenantsCreateCmd) Run(env *Env) error {
	if host.ValidTenantName(c.Name) != nil {
		return tenantNameError(c.Name)
	}
	l, err := openTenants(env)
	if err != nil {
		return err
	}
	defer l.close()
	tn, err := l.h.CreateTenant(env.Ctx, c.Name)
	if errors.Is(err, host.ErrTenantExists) {
		return reportedError{Err: fmt.Errorf("tenant %q already exists", c.Name), Code: 1}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "created tenant %s\n", tn.Name)
	return nil
}

// TenantsLsCmd is `airlock tenants ls`.
type TenantsLsCmd struct {
	JSON bool `name:"json" help:"One JSON object per tenant: name, created."`
}

// Run lists the tenants by name.
func (c *TenantsLsCmd) Run(env *Env) error {
	l, err := openTenants(env)
	if err != nil {
		return err
	}
	defer l.close()
	tenants, err := l.h.Tenants(env.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, tenants...)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED")
	for _, tn := range tenants {
		fmt.Fprintf(tw, "%s\t%s\n", tn.Name, tn.Created.Local().Format(timeLayout))
	}
	return tw.Flush()
}

// timeLayout is how the tenant and key listings show times.
const timeLayout = "2006-01-02 15:04:05"
