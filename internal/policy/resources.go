package policy

import "slices"

// HostResources lists the fields of d that reach the host's own resources:
// host directories (workspace source, mounts, root filesystem), a host file
// (the upstream CA), fixed addresses (pins and CIDR rules, both of which
// lift the proxy's guard against loopback, private and metadata addresses),
// and the host's secret store (credentials). A server whose tenants are not
// trusted refuses their documents when the list is not empty.
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
	if len(n.Credentials) > 0 {
		out = append(out, "network.credentials")
	}
	return out
}
