// Package handoff lets `airlock sandbox run` hand its command to a
// long-lived host process of the same user (`airlock sandbox daemon`), which
// keeps sandboxes made ahead of demand, instead of making a sandbox itself:
// the caller then pays its own start, one request and the command, not a
// sandbox's start and teardown.
//
// The host listens on a unix socket in $AIRLOCK_HOME (SocketPath), mode
// 0600. Each side checks the other's credentials (SO_PEERCRED): the host
// serves only its own uid, and the caller talks only to a host of its own
// uid, so neither a request nor the caller's standard streams cross users.
//
// One connection is one command, in a sandbox of its own: the caller sends
// its standard output and error (and, with stdin, the read end of a pipe it
// feeds) as descriptors with the request; the host takes a sandbox of the
// request's spec (from its pool when it has one; prepared, from the warm
// pool of its template when the request names one), starts the command with
// those descriptors as its streams, answers "started", forwards the
// signals the caller sends, answers the result, and destroys the sandbox
// once the answer is out. A sandbox is never given to a second command. The
// connection's end before the result kills the command.
//
// A host that refuses (wrong uid), is gone (stale socket) or absent makes
// Start return ErrNoHost before anything ran: the caller starts the sandbox
// itself. The package imports only the sandbox contract, so that the small
// front end (cmd/airlock) links it.
package handoff

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// SocketName is the host's socket under $AIRLOCK_HOME.
const SocketName = "sandbox.sock"

// SocketPath is the socket of the host serving the airlock home home.
func SocketPath(home string) string { return filepath.Join(home, SocketName) }

// ErrNoHost means no host took the request and nothing ran: the caller
// makes the sandbox itself.
var ErrNoHost = errors.New("no sandbox host")

// Request is one command to run in a fresh sandbox. It travels in the
// binary form of codec.go.
type Request struct {
	// Spec is the sandbox's. Its host paths must be absolute: the host's
	// working directory is not the caller's.
	Spec sandbox.Spec
	// Argv is the command.
	Argv []string
	// Timeout and MaxOutput are sandbox.Command's.
	Timeout   time.Duration
	MaxOutput int64
	// Stdin says whether a third descriptor, the command's stdin, follows
	// standard output and error.
	Stdin bool
	// Prepare, when set, must bring the sandbox to readiness before the
	// command starts (a template's start command and readiness check). A
	// host without Server.Prepare does not take such a request (the
	// caller gets ErrNoHost and prepares a sandbox of its own).
	Prepare *Prepare
	// Words, when set, is the whole request: the command line of
	// `airlock sandbox run` after "run" (its flags, then -- and the
	// command), as a client that does not read it sent it (the front
	// end's entry before the Go runtime, internal/thinentry). The host
	// reads it as the front end would (Server.Front), writes what the
	// front end would print on the caller's standard error itself, and
	// ends with the exit status (the reply's Reported and Status). Spec,
	// Argv, the bounds and Prepare are then absent; the descriptors are
	// standard output and error, and, when Stdin is set, the read end of
	// a pipe the caller copies its stdin into if the words ask for it
	// (-i: the reply's Stdin; without -i the host closes it unread).
	Words []string
	// Dir, with Words, is the caller's working directory (absolute, as
	// os.Getwd gives it): relative host paths in the words are read from
	// it, as the caller's own front end would read them. Empty: such words
	// are left to the caller's front end.
	Dir string
}

// Prepare is how a request's sandbox is brought to readiness.
type Prepare struct {
	// How is what Server.Prepare reads (a template's start command and
	// readiness check); the host does not look into it otherwise.
	How json.RawMessage
	// Pool names the sandboxes prepared alike (a template's tenant, name,
	// version and hash); with Size above 0 the host keeps Size of them
	// made and prepared ahead, per name and spec, when its Backend can
	// (a pool's Warm and Take), and hands the command one of them.
	Pool string
	Size int
}

// reply is one message from the host: Started once the command runs, then
// Result; Error instead of either says what failed (the text the caller's
// own start would have printed). A request in Words ends with Reported
// instead of Result or Error: the host printed what there was to print on
// the caller's standard error, and Status is the caller's exit status.
// Stdin, with Started, tells a caller in Words that the command reads
// the pipe it sent: it copies its own stdin into it from then on (a caller
// that is not told so never reads its stdin, which is not the command's).
type reply struct {
	Started  bool
	Stdin    bool
	Result   *sandbox.Result
	Error    string
	Reported bool
	Status   int
}

// control is a message from the caller after the request.
type control struct {
	Signal int
}

// maxRequest bounds the request the host reads: a spec's environment and
// trusted CAs are its largest parts (sandbox.Spec bounds both well below
// this).
const maxRequest = 8 << 20

// maxControl bounds a control message after the request (a few bytes).
const maxControl = 64
