package handoff

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// The messages on a handoff connection, in the binary form of the control
// protocol's (execproto.EncodeFields: numbered fields in increasing order,
// zero values absent, one encoding per message, decoded strictly), each
// framed by its length (4 bytes, big-endian). encoding/json cost the
// caller, a fresh process on every warm `sandbox run`, its first use of
// the Spec's and Result's types (reflection over their fields: about 6 % of
// the caller's CPU, docs/benchmarks.md). A new field of Request, Spec,
// Result or what they hold takes the next number here
// (TestCodecFieldsCovered fails on a field the codec does not carry); a
// number never changes meaning. A caller and a host of different forms
// (JSON before) do not understand each other: the host closes the
// connection unanswered, and the caller starts its sandbox itself.

// errMessage is the decoder's error for a message that does not parse.
var errMessage = errors.New("malformed handoff message")

// frameHeader is the length before each message.
const frameHeader = 4

// maxReply bounds a reply the caller reads: a result's message and
// fingerprint are its largest parts.
const maxReply = 1 << 20

// EncodeRequest returns r framed as Start sends it (Start itself sets
// r.Stdin from its streams first). It is exported for the tests of the
// front end's thin entry (cmd/airlock), which sends a request in Words
// that must be these bytes.
func EncodeRequest(r *Request) ([]byte, error) {
	return frame(func(e *execproto.Encoder) {
		e.Msg(1, false, func(e *execproto.Encoder) { appendSpec(e, &r.Spec) })
		e.Strs(2, r.Argv)
		e.Int(3, int64(r.Timeout))
		e.Int(4, r.MaxOutput)
		e.Flag(5, r.Stdin)
		if r.Prepare != nil {
			e.Msg(6, true, func(e *execproto.Encoder) {
				e.Bytes(1, r.Prepare.How)
				e.Str(2, r.Prepare.Pool)
				e.Int(3, int64(r.Prepare.Size))
			})
		}
		e.Strs(7, r.Words)
		e.Str(8, r.Dir)
	})
}

func decodeRequest(p []byte, r *Request) error {
	return decode(p, func(d *execproto.Decoder) {
		for d.More() {
			switch n := d.Field(); n {
			case 1:
				d.Msg(false, func(d *execproto.Decoder) { decodeSpec(d, &r.Spec) })
			case 2:
				r.Argv = d.Strs()
			case 3:
				r.Timeout = time.Duration(d.Int())
			case 4:
				r.MaxOutput = d.Int()
			case 5:
				r.Stdin = true
			case 6:
				r.Prepare = new(Prepare)
				d.Msg(true, func(d *execproto.Decoder) { decodePrepare(d, r.Prepare) })
			case 7:
				r.Words = d.Strs()
			case 8:
				r.Dir = d.Str()
			default:
				d.Unknown(n)
			}
		}
	})
}

func decodePrepare(d *execproto.Decoder, p *Prepare) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			// Server.Prepare reads it as JSON: anything else is not a
			// preparation.
			if p.How = d.Bytes(); !json.Valid(p.How) {
				d.Fail("not JSON")
			}
		case 2:
			p.Pool = d.Str()
		case 3:
			p.Size = intOf(d)
		default:
			d.Unknown(n)
		}
	}
}

func appendSpec(e *execproto.Encoder, s *sandbox.Spec) {
	e.Str(1, s.ID)
	e.Str(2, s.RootFS)
	e.Strs(3, s.Layers)
	e.Flag(4, s.WritableRoot)
	e.Flag(5, s.Sudo)
	e.Strs(6, s.RootCaps)
	e.Str(7, s.Dir)
	e.Str(8, s.Workspace)
	e.Str(9, s.WorkspaceMode)
	e.Msgs(10, len(s.Mounts), func(i int, e *execproto.Encoder) {
		m := &s.Mounts[i]
		e.Str(1, m.Source)
		e.Str(2, m.Target)
		e.Flag(3, m.ReadOnly)
	})
	e.Strs(11, s.Env)
	e.Msg(12, false, func(e *execproto.Encoder) {
		l := &s.Limits
		e.Int(1, l.MemoryBytes)
		e.Int(2, l.Pids)
		e.Float(3, l.CPUs)
		e.Int(4, l.DiskBytes)
		e.Flag(5, l.RequireHard)
	})
	e.Str(13, s.Network)
	e.Str(14, s.ProxySocket)
	e.Bytes(15, s.TrustedCAs)
	e.Int(16, int64(s.TTL))
	e.Str(17, s.User)
	e.Msg(18, false, func(e *execproto.Encoder) {
		a := &s.Account
		e.Str(1, a.Name)
		e.Str(2, a.Home)
		e.Flag(3, a.HomeIsWorkspace)
		e.Flag(4, a.RootHome)
	})
	e.Str(19, s.Runtime)
	e.Flag(20, s.StaticReadOnly)
}

func decodeSpec(d *execproto.Decoder, s *sandbox.Spec) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			s.ID = d.Str()
		case 2:
			s.RootFS = d.Str()
		case 3:
			s.Layers = d.Strs()
		case 4:
			s.WritableRoot = true
		case 5:
			s.Sudo = true
		case 6:
			s.RootCaps = d.Strs()
		case 7:
			s.Dir = d.Str()
		case 8:
			s.Workspace = d.Str()
		case 9:
			s.WorkspaceMode = d.Str()
		case 10:
			d.Msgs(func(d *execproto.Decoder) {
				s.Mounts = append(s.Mounts, sandbox.Mount{})
				decodeMount(d, &s.Mounts[len(s.Mounts)-1])
			})
		case 11:
			s.Env = d.Strs()
		case 12:
			d.Msg(false, func(d *execproto.Decoder) { decodeLimits(d, &s.Limits) })
		case 13:
			s.Network = d.Str()
		case 14:
			s.ProxySocket = d.Str()
		case 15:
			s.TrustedCAs = d.Bytes()
		case 16:
			s.TTL = time.Duration(d.Int())
		case 17:
			s.User = d.Str()
		case 18:
			d.Msg(false, func(d *execproto.Decoder) { decodeAccount(d, &s.Account) })
		case 19:
			s.Runtime = d.Str()
		case 20:
			s.StaticReadOnly = true
		default:
			d.Unknown(n)
		}
	}
}

func decodeMount(d *execproto.Decoder, m *sandbox.Mount) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			m.Source = d.Str()
		case 2:
			m.Target = d.Str()
		case 3:
			m.ReadOnly = true
		default:
			d.Unknown(n)
		}
	}
}

func decodeLimits(d *execproto.Decoder, l *sandbox.Limits) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			l.MemoryBytes = d.Int()
		case 2:
			l.Pids = d.Int()
		case 3:
			l.CPUs = d.Float()
		case 4:
			l.DiskBytes = d.Int()
		case 5:
			l.RequireHard = true
		default:
			d.Unknown(n)
		}
	}
}

func decodeAccount(d *execproto.Decoder, a *sandbox.Account) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			a.Name = d.Str()
		case 2:
			a.Home = d.Str()
		case 3:
			a.HomeIsWorkspace = true
		case 4:
			a.RootHome = true
		default:
			d.Unknown(n)
		}
	}
}

func encodeReply(r *reply) ([]byte, error) {
	return frame(func(e *execproto.Encoder) {
		e.Flag(1, r.Started)
		if r.Result != nil {
			e.Msg(2, true, func(e *execproto.Encoder) { appendResult(e, r.Result) })
		}
		e.Str(3, r.Error)
		e.Flag(4, r.Reported)
		e.Int(5, int64(r.Status))
		e.Flag(6, r.Stdin)
	})
}

func decodeReply(p []byte, r *reply) error {
	return decode(p, func(d *execproto.Decoder) {
		for d.More() {
			switch n := d.Field(); n {
			case 1:
				r.Started = true
			case 2:
				r.Result = new(sandbox.Result)
				d.Msg(true, func(d *execproto.Decoder) { decodeResult(d, r.Result) })
			case 3:
				r.Error = d.Str()
			case 4:
				r.Reported = true
			case 5:
				r.Status = intOf(d)
			case 6:
				r.Stdin = true
			default:
				d.Unknown(n)
			}
		}
	})
}

func appendResult(e *execproto.Encoder, r *sandbox.Result) {
	e.Str(1, string(r.Outcome))
	e.Int(2, int64(r.ExitCode))
	e.Int(3, int64(r.Signal))
	e.Str(4, r.NotStarted)
	e.Str(5, r.Message)
	e.Msg(6, false, func(e *execproto.Encoder) {
		u := &r.Usage
		e.Int(1, int64(u.Wall))
		e.Int(2, int64(u.CPU))
		e.Int(3, u.MaxRSS)
		e.Int(4, u.MemoryPeak)
	})
	e.Str(7, r.Fingerprint)
}

func decodeResult(d *execproto.Decoder, r *sandbox.Result) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			r.Outcome = sandbox.Outcome(d.Str())
		case 2:
			r.ExitCode = intOf(d)
		case 3:
			r.Signal = intOf(d)
		case 4:
			r.NotStarted = d.Str()
		case 5:
			r.Message = d.Str()
		case 6:
			d.Msg(false, func(d *execproto.Decoder) { decodeUsage(d, &r.Usage) })
		case 7:
			r.Fingerprint = d.Str()
		default:
			d.Unknown(n)
		}
	}
}

func decodeUsage(d *execproto.Decoder, u *sandbox.Usage) {
	for d.More() {
		switch n := d.Field(); n {
		case 1:
			u.Wall = time.Duration(d.Int())
		case 2:
			u.CPU = time.Duration(d.Int())
		case 3:
			u.MaxRSS = d.Int()
		case 4:
			u.MemoryPeak = d.Int()
		default:
			d.Unknown(n)
		}
	}
}

func encodeControl(c control) ([]byte, error) {
	return frame(func(e *execproto.Encoder) { e.Int(1, int64(c.Signal)) })
}

func decodeControl(p []byte, c *control) error {
	return decode(p, func(d *execproto.Decoder) {
		for d.More() {
			switch n := d.Field(); n {
			case 1:
				c.Signal = intOf(d)
			default:
				d.Unknown(n)
			}
		}
	})
}

// intOf reads an int field.
func intOf(d *execproto.Decoder) int {
	v := d.Int()
	if v < math.MinInt || v > math.MaxInt {
		d.Fail("out of range")
		return 0
	}
	return int(v)
}

// frame encodes a message after the room for its length, and fills that in.
func frame(fields func(*execproto.Encoder)) ([]byte, error) {
	p, err := execproto.EncodeFields(fields)
	if err != nil {
		return nil, err
	}
	b := make([]byte, frameHeader, frameHeader+len(p))
	binary.BigEndian.PutUint32(b, uint32(len(p)))
	return append(b, p...), nil
}

// decode parses one message's payload (without its length).
func decode(p []byte, fields func(*execproto.Decoder)) error {
	if err := execproto.DecodeFields(p, fields); err != nil {
		return fmt.Errorf("%w: %w", errMessage, err)
	}
	return nil
}

// readFrame reads one message's payload from r: its length, at most
// limit, then as many bytes. io.EOF means the connection ended between
// messages.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", errMessage, n, limit)
	}
	// Grown as the bytes come, not sized by the length read.
	p, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err == nil && len(p) < int(n) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cut short after %d of %d bytes: %w", errMessage, len(p), n, err)
	}
	return p, nil
}
