// Package thinentry is the front end's pre-runtime entry: a thin client
// that serves a warm `airlock sandbox run` before the Go runtime starts,
// and lets the runtime start, with the kernel's stack untouched, for
// everything else (issue 29).
//
// Why: a warm sandbox run hands its command to a running `airlock sandbox
// daemon`, and on a machine where a page's first touch costs ~11 µs the Go
// process's own start and exit were ~10 ms of a ~16.8 ms warm run, more
// than bubblewrap's whole cold start. A client in freestanding C did the
// same hand-off in 7.5 ms (docs/benchmarks.md). This package puts that
// client in the front end's binary, as its ELF entry, without cgo: the
// entry is Go assembly (entry_linux_amd64.s) that calls the C function in
// the package's .syso and then jumps to _rt0_amd64_linux. Only cmd/airlock
// built with the airlock_thin tag imports it, and only with
// -ldflags=-E=airlock_thin_entry is it the entry; scripts/build-thin.sh
// does both and generates the .syso from c/thin.c (it is never
// committed). A plain go build or go install builds the front end
// without it.
//
// The fast path is taken only when all of these hold, else the Go runtime
// runs the command line as it always did:
//
//   - argv is `airlock sandbox run WORDS...` (at least one word): the
//     sandbox host reads the words as the Go front end would
//     (sandboxcli.FrontWords) and leaves to it, unanswered, what it cannot
//     read so (--image, a flag of airlock-host's such as --allow or
//     --help, a relative host path when the working directory is unknown
//     or with a usage error, -i from a process whose fd 0 is closed): the
//     fallback below;
//   - $AIRLOCK_NO_HANDOFF and $AIRLOCK_TRACE are unset or empty (the first
//     occurrence of a name counts, as with os.Getenv);
//   - the home is $AIRLOCK_HOME if not empty, else /var/lib/airlock for
//     euid 0, else $XDG_DATA_HOME/airlock if that is not empty, else
//     $HOME/.local/share/airlock (sandboxcli.OSEnv); it is absolute with no
//     "." or ".." component (Go cleans a path lexically, the kernel does
//     not: such a path is left to Go), and home/sandbox.sock fits sun_path;
//   - the socket is owned by the euid, a connection to it succeeds, and the
//     peer's uid (SO_PEERCRED) is the euid, as handoff's dial checks;
//   - the request, handoff.EncodeRequest(&handoff.Request{Words: argv[3:]}),
//     fits a 256 KiB buffer and is sent, with stdout and stderr as
//     SCM_RIGHTS, in one sendmsg (the rest, if any, by plain writes). When
//     a word before any "--" is -i or --interactive and fd 0 is open, the
//     request also says Stdin and the read end of a new pipe goes third.
//     The working directory goes as Dir, as os.Getwd gives it ($PWD if it
//     is absolute and names ".", else getcwd's absolute answer; none
//     otherwise): the host reads relative host paths from it;
//   - the first reply is whole and well formed, in the strict binary form
//     handoff decodes. A reply that says Reported ends the process with
//     its Status, one with an Error prints "airlock: <error>" and exits
//     125, one that says Started goes on; anything else (the end of the
//     stream included) closes the socket and falls back: nothing ran, and
//     the Go front end hands off itself or starts the sandbox.
//
// Before the socket, it does what cmd/airlock's init does for sandbox run
// (sandboxcli.DieWithParent): the parent-death signal, and exit 125 when
// the parent is already gone. From the request on, SIGINT, SIGTERM, SIGHUP
// and SIGQUIT are blocked (restored on a fallback); after Started they are
// read from a signalfd and forwarded as control frames, as sandboxcli's
// catchSignals does. If Started also says Stdin (the words ask for it:
// the host read -i), stdin is copied into the pipe, 64 KiB at a time,
// until it ends (the pipe is closed: the command reads the end) or the
// pipe's reader is gone (EPIPE, SIGPIPE blocked), as handoff.Start's copy
// does; otherwise the pipe is closed and stdin is never read. The next
// reply ends the process: Reported with its
// Status; the end of the stream with the Go client's words ("sandbox host:
// the connection ended before the command's result: EOF") and 125;
// anything else with "sandbox host: unexpected answer instead of the
// command's result" and 125.
//
// The entry uses no libc, no thread-local storage and no static data it
// writes: the Go runtime has not set anything up, and Go's internal
// linker applies none of the C object's own relocations, so the script
// links the C on its own into one block of code and constants first. What
// the C needs is in its stack frame, or in the request and reply buffers
// it maps on the fast path. Nothing but cmd/airlock may import this
// package.
package thinentry
