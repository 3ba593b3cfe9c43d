package cli

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
)

// TenantsCmd is `airlock tenants`.
type TenantsCmd struct {
	Create TenantsCreateCmd `cmd:"" help:"Create a tenant: the owner of runs, secrets, credits, policies and API keys."`
	Ls     TenantsLsCmd     `cmd:"" help:"List the tenants."`
}

// openTenantStore opens the run store for the tenant and key commands. It
// needs no redaction of the env's model keys: what these commands write is
// tenant names, key labels, scope names and key hashes, never a key.
func openTenantStore(env *Env) (store.Store, error) {
	if env.Home == "" {
		return nil, errors.New("no airlock home directory")
	}
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		return nil, err
	}
	st, err := host.OpenStore(env.Ctx, env.Home, env.Store, store.NoRedaction)
	return st, hostError(err)
}

// tenantNameError is the usage error of a malformed tenant name.
func tenantNameError(name string) error {
	return usageError{Err: fmt.Errorf("tenant name %q: want 1 to %d of a-z, 0-9 and '-', starting with a letter or digit",
		name, store.MaxTenantNameLen)}
}

// noTenantError is the usage error of a tenant that does not exist.
func noTenantError(name string) error {
	return usageError{Err: fmt.Errorf("no tenant %q (airlock tenants create %s makes it)", name, name)}
}

// TenantsCreateCmd is `airlock tenants create NAME`.
type TenantsCreateCmd struct {
	Name string `arg:"" help:"Tenant name: 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit (the command line's own runs belong to ${local_tenant})." placeholder:"NAME"`
}

// Run creates the tenant. A name already taken exits 1, so a script can
// tell it from bad input (2) and from airlock failing (125).
func (c *TenantsCreateCmd) Run(env *Env) error {
	if store.ValidateTenantName(c.Name) != nil {
		return tenantNameError(c.Name)
	}
	st, err := openTenantStore(env)
	if err != nil {
		return err
	}
	defer st.Close()
	tn, err := st.CreateTenant(env.Ctx, c.Name)
	if errors.Is(err, store.ErrExists) {
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
	st, err := openTenantStore(env)
	if err != nil {
		return err
	}
	defer st.Close()
	tenants, err := st.ListTenants(env.Ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		type tenantJSON struct {
			Name    string    `json:"name"`
			Created time.Time `json:"created"`
		}
		vs := make([]tenantJSON, 0, len(tenants))
		for _, tn := range tenants {
			vs = append(vs, tenantJSON{tn.Name, tn.CreatedAt.UTC()})
		}
		return sandboxcli.WriteJSON(env.Stdout, vs...)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED")
	for _, tn := range tenants {
		fmt.Fprintf(tw, "%s\t%s\n", tn.Name, tn.CreatedAt.Local().Format(timeLayout))
	}
	return tw.Flush()
}

// timeLayout is how the tenant and key listings show times.
const timeLayout = "2006-01-02 15:04:05"
