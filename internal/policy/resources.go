package policy

import "slices"

// HostResources lists the fields of d that reach the host's own resources:
// host directories (workspace source, mounts, root filesystem), a host file
// (the upstream CA), fixed addresses (pins and CIDR rules, both of which
// lift the proxy's guard against loopback, private and metadata addresses).
// A server whose tenants are not trusted refuses their documents when the
// list is not empty. Credentials are not in it: a run's proxy looks a
// credential's secret up under the run's own tenant, so a tenant's policy
// can bind only secrets that tenant set.
func (d *Document) HostResources() []string {
	var out []string
	if d.Sandbox.Workspace.Source != "" {
		out = append(out, "sandbox.workspace.source")
	}
	if len(d.Sandbox.Mounts) > 0 {
		out = append(out, "sandbox.mounts")
	}
	if d.Sandbox.RootFS != "" {
		out = append(out, "sandbox.rootfs")
	}
	n := d.Network
	if n.UpstreamCA != "" {
		out = append(out, "network.upstream_ca")
	}
	if len(n.Resolve) > 0 {
		out = append(out, "network.resolve")
	}
	if slices.ContainsFunc(n.Allow, func(r Rule) bool { return r.CIDR != "" }) {
		out = append(out, "network.allow[].cidr")
	}
	return out
}
