package cli

// TemplateMore is the subcommands of `airlock template` that live in files
// of their own: each is a field here, tagged `cmd:""` like TemplateCmd's
// (TemplateCmd embeds this struct, so kong lists them beside create, ls,
// show and rm).
type TemplateMore struct {
	Build TemplateBuildCmd `cmd:"" help:"Build an image from a Dockerfile into the host's store: each RUN in a sandbox under the build policy, each step cached."`
}
