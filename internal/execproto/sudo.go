package execproto

// Sudo (Setup.Sudo): a sudo command inside the sandbox runs a command as
// another user of the sandbox, root by default, as the executor starts any
// command: in the sandbox's own user namespace, with no capability (unless
// Setup.RootCaps), seccomp, Landlock and no_new_privs as every command has.
// It is the executor's binary called by that name (SudoHelper), which
// connects to SudoSocket and sends a SudoRequest line with its standard
// streams (SCM_RIGHTS); the executor starts the command with them and
// answers a SudoReply line when it has ended. A helper that goes away
// (killed with its caller) takes its command with it: the executor kills
// the command's tree when the connection ends first.
const (
	// SudoSocket is the socket's path inside the sandbox.
	SudoSocket = "/run/airlock/sudo"
	// SudoHelper is the sudo command's path inside the sandbox (on every
	// command's PATH, after the system's directories).
	SudoHelper = "/run/airlock/bin/sudo"
	// MaxSudoRequest bounds a SudoRequest line.
	MaxSudoRequest = 1 << 20
)

// SudoRequest asks the executor to start a command for the sudo command.
type SudoRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// User runs the command: a name or decimal uid; empty is root.
	User string `json:"user,omitempty"`
}

// SudoReply is how a sudo request ended: the command's exit status (128 +
// the signal that ended it), or Error and status 1 when it did not run
// (127 for a command not found).
type SudoReply struct {
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}
