// Package execproto is the wire protocol between the host and the executor
// that runs as PID 1 inside every sandbox.
//
// It is the only contract across the trust boundary, so it is small, framed,
// versioned and bounded. A frame is a 4-byte big-endian length, a type byte, a
// 4-byte stream ID and at most MaxPayload bytes of payload. The control
// messages (Hello, Setup, Ready, Request, Result, Error) are in a binary
// form with one encoding per message (codec.go, MessageFrame and
// DecodeMessage); the payloads of data frames that carry messages (watch
// events, event drops) are strict JSON (Decode). Stream 0 carries
// the handshake: the host sends Hello and Setup at once, the executor answers
// Hello, reads the Setup only if the versions match, and sends Ready once the
// sandbox is built. Every request (run a command, read a file, export the workspace)
// opens its own stream with an Open frame and ends with a Result frame, so many
// commands can run at once over one connection. Data frames carry stdin,
// stdout, stderr and file contents on numbered channels with credit-based flow
// control: a sender holds at most its stream's window of unacknowledged bytes
// per channel, and the receiver returns credit with Ack frames as it consumes,
// so a slow reader slows the writer instead of growing a buffer without bound.
// The window and the largest data frame are Window and ChunkSize unless the
// request that opens the stream asks for its own, up to MaxWindow and
// MaxChunkSize: bulk transfers (checkpoints, exports, an archive unpacked in
// the sandbox) ask for BulkWindow and BulkChunkSize. Each side buffers at most
// that window per channel of the stream, and the host, which opens every
// stream, chooses it. A watch stream
// stays open until the host cancels it and carries one WatchEvent per Data
// frame; when the host reads too slowly, the executor drops events and says
// so (WatchOverflow) rather than queue more than MaxWatchQueue of them. A
// checkpoint stream carries an "airlock delta v1" tar stream of what changed
// in /workspace since a baseline the executor recorded (package executor
// documents the format); its result names the new baseline.
//
// Connect streams. A connect stream (OpConnect) relays one TCP connection to
// Port on the sandbox's own loopback: the executor dials 127.0.0.1, then ::1
// if that is refused, and never any other address, so the relay reaches only
// what listens inside the sandbox. When the dial succeeds it closes the Stderr
// channel, which a connect stream never uses: that Close tells the host the
// connection is up. The host need not wait for it: Stdin data it sends right
// behind the Open (a request's first bytes, as TCP Fast Open carries them in
// the SYN) waits in the stream's window until the dial is done, and is dropped
// if the dial fails. Then Stdin data goes to the socket and what the socket
// sends comes as Stdout data, each with the stream's flow control; a Close of
// Stdin from the host shuts the socket's write side (a TCP half-close), and
// the socket's EOF comes as a Close of Stdout. The Result ends the stream once
// both directions are done, or the connection broke, or the host cancelled; a
// failed dial ends it at once with Error and Errno (ECONNREFUSED when nothing
// listens). A Cancel closes the socket at once, unless the host closed Stdin
// before it: then it is a socket's close, not an abort (a dial still under way
// is finished), and the executor still writes the Stdin data it has, waits for
// the server's EOF while dropping what the server sends, and closes the socket
// after a few seconds in any case. The executor relays at most MaxConnects
// connections at once.
//
// Egress streams. When Setup.ProxyStreams is set, the proxy forwarder's
// connections leave the sandbox on streams of this connection rather than
// through a socket bound inside: the host opens egress streams (OpEgress)
// ahead of need, and each waits in the executor until a command connects
// to ProxyAddr. The executor then closes the stream's Stderr, as a connect
// stream does once its dial succeeded, and relays that connection exactly
// as a connect stream relays its socket; the host relays the stream to its
// egress proxy's socket for the sandbox, and opens another egress stream
// to wait in its place. Only the host opens streams, as always: a sandbox
// can make the executor use a stream the host gave it, never open one. The
// executor holds the accepted connections that no stream has taken yet in
// the listener's backlog, and an egress stream counts as a connect stream
// against MaxConnects once it relays.
//
// Everything decoded here is untrusted input on the host side: ReadFrame and
// Decode reject malformed frames with ErrFrame and never allocate more than
// one frame's bound. The package is a leaf: it imports only the standard
// library, and both the host and the executor import it.
package execproto
