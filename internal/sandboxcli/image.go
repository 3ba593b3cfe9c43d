package sandboxcli

import (
	"errors"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/imageroot"
)

// ImageRunCmd is RunCmd with --image, as the whole command line reads it
// (package cli's RunCmd embeds RunCmd and its ImageFlag): what Main runs
// for `airlock sandbox run`.
type ImageRunCmd struct {
	RunCmd
	Image string `help:"Make the sandbox's root this image of the host's store (airlock image ls) instead of the host's system directories. Its config gives the environment, working directory and user, and, when no command is given, the command." placeholder:"REF"`
}

// errDecline is a command's answer when it cannot be sure it does what the
// whole command line would: Main then returns ok false.
var errDecline = errors.New("left to the whole command line")

// Run is RunCmd.Run, with the image --image names as the sandbox's root
// (what the whole command line's ImageFlag does, through imageroot, the
// lookup and semantics it shares with the image store). It declines, having
// done nothing, when imageroot.Lookup cannot be sure of the image (see
// there), when the flags are wrong in any way, and when the image gives no
// command and none is given: the whole command line then opens the store
// and says what is wrong in its own words.
func (c *ImageRunCmd) Run(env *Env) error {
	if c.Image == "" {
		return c.RunCmd.Run(env)
	}
	spec, err := c.Spec(BuiltinDefaults, false)
	if err != nil || spec.RootFS != "" {
		return errDecline
	}
	root, ok := imageroot.Lookup(filepath.Join(env.Home, "images"), c.Image)
	if !ok {
		return errDecline
	}
	root.Apply(&spec)
	if len(c.Command) == 0 || len(c.Command) == 1 && c.Command[0] == "--" {
		// No command: the image's own.
		argv, err := root.Command(nil)
		if err != nil {
			return errDecline
		}
		c.Command = append([]string{"--"}, argv...)
	}
	return c.Start(env, spec, BuiltinDefaults, nil)
}
