package execproto

import (
	"errors"
	"fmt"
	"math"
)

// errNilElement is the encoder's error for a nil pointer in a list.
var errNilElement = errors.New("a nil element in a list")

// The messages' fields. A new field takes the next number; a field's
// number never changes meaning (TestMessageFieldsCovered fails on a field
// the codec does not carry).

func (h Hello) appendFields(e *encoder) { e.int(1, int64(h.Version)) }

func (h *Hello) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			h.Version = d.int()
		default:
			d.unknown(n)
		}
	}
}

func (p HostPath) appendFields(e *encoder) {
	e.str(1, p.Path)
	e.uint(2, p.Dev)
	e.uint(3, p.Ino)
}

func (p *HostPath) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			p.Path = d.str()
		case 2:
			p.Dev = d.uint(math.MaxUint64)
		case 3:
			p.Ino = d.uint(math.MaxUint64)
		default:
			d.unknown(n)
		}
	}
}

// hostPath encodes an optional host path as field n.
func (e *encoder) hostPath(n uint64, p *HostPath) {
	if p != nil {
		e.msg(n, true, *p)
	}
}

func (d *decoder) hostPath() *HostPath {
	p := new(HostPath)
	d.msg(p, true)
	return p
}

func (w Workspace) appendFields(e *encoder) {
	e.str(1, w.Mode)
	e.int(2, int64(w.FD))
	e.hostPath(3, w.Source)
}

func (w *Workspace) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			w.Mode = d.str()
		case 2:
			w.FD = d.int()
		case 3:
			w.Source = d.hostPath()
		default:
			d.unknown(n)
		}
	}
}

func (m Mount) appendFields(e *encoder) {
	e.int(1, int64(m.FD))
	e.str(2, m.Target)
	e.flag(3, m.ReadOnly)
	e.flag(4, m.File)
	e.hostPath(5, m.Source)
}

func (m *Mount) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			m.FD = d.int()
		case 2:
			m.Target = d.str()
		case 3:
			m.ReadOnly = true
		case 4:
			m.File = true
		case 5:
			m.Source = d.hostPath()
		default:
			d.unknown(n)
		}
	}
}

func (u User) appendFields(e *encoder) {
	e.str(1, u.Name)
	e.int(2, int64(u.UID))
	e.int(3, int64(u.GID))
	e.str(4, u.Home)
}

func (u *User) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			u.Name = d.str()
		case 2:
			u.UID = d.int()
		case 3:
			u.GID = d.int()
		case 4:
			u.Home = d.str()
		default:
			d.unknown(n)
		}
	}
}

func (s Setup) appendFields(e *encoder) {
	e.str(1, s.Hostname)
	e.int(2, int64(s.RootFD))
	e.hostPath(3, s.RootPath)
	e.ints(4, s.Layers)
	e.msgs(5, len(s.LayerPaths), func(i int) Message {
		if s.LayerPaths[i] == nil {
			e.err = fmt.Errorf("setup: image layer %d: %w", i, errNilElement)
			return HostPath{}
		}
		return *s.LayerPaths[i]
	})
	e.strs(6, s.SystemDirs)
	e.msgs(7, len(s.SystemTrees), func(i int) Message { return s.SystemTrees[i] })
	e.strs(8, s.EtcFiles)
	e.msg(9, s.Workspace != Workspace{}, s.Workspace)
	e.str(10, s.WorkspaceAlias)
	e.flag(11, s.RootHome)
	e.msgs(12, len(s.Mounts), func(i int) Message { return s.Mounts[i] })
	e.int(13, s.DiskBytes)
	e.int(14, s.ShmBytes)
	e.int(15, int64(s.ProxyFD))
	e.str(16, s.ProxyAddr)
	e.hostPath(17, s.ProxyPath)
	e.flag(18, s.ProxyStreams)
	e.msg(19, s.User != User{}, s.User)
	e.uintMap(20, s.Rlimits)
	e.flag(21, s.NoSetGroups)
	e.flag(22, s.RequireLandlock)
	e.flag(23, s.WritableRoot)
	e.strs(24, s.RootCaps)
	e.flag(25, s.Sudo)
	e.flag(26, s.GVisor)
	if s.Account != nil {
		e.msg(27, true, *s.Account)
	}
	e.int(28, s.Pids)
	e.flag(29, s.StaticReadOnly)
}

func (s *Setup) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			s.Hostname = d.str()
		case 2:
			s.RootFD = d.int()
		case 3:
			s.RootPath = d.hostPath()
		case 4:
			s.Layers = d.ints()
		case 5:
			d.msgs(func() Decodable {
				p := new(HostPath)
				s.LayerPaths = append(s.LayerPaths, p)
				return p
			})
		case 6:
			s.SystemDirs = d.strs()
		case 7:
			d.msgs(func() Decodable {
				s.SystemTrees = append(s.SystemTrees, Mount{})
				return &s.SystemTrees[len(s.SystemTrees)-1]
			})
		case 8:
			s.EtcFiles = d.strs()
		case 9:
			d.msg(&s.Workspace, false)
		case 10:
			s.WorkspaceAlias = d.str()
		case 11:
			s.RootHome = true
		case 12:
			d.msgs(func() Decodable { s.Mounts = append(s.Mounts, Mount{}); return &s.Mounts[len(s.Mounts)-1] })
		case 13:
			s.DiskBytes = d.int64()
		case 14:
			s.ShmBytes = d.int64()
		case 15:
			s.ProxyFD = d.int()
		case 16:
			s.ProxyAddr = d.str()
		case 17:
			s.ProxyPath = d.hostPath()
		case 18:
			s.ProxyStreams = true
		case 19:
			d.msg(&s.User, false)
		case 20:
			s.Rlimits = d.uintMap()
		case 21:
			s.NoSetGroups = true
		case 22:
			s.RequireLandlock = true
		case 23:
			s.WritableRoot = true
		case 24:
			s.RootCaps = d.strs()
		case 25:
			s.Sudo = true
		case 26:
			s.GVisor = true
		case 27:
			s.Account = new(User)
			d.msg(s.Account, true)
		case 28:
			s.Pids = d.int64()
		case 29:
			s.StaticReadOnly = true
		default:
			d.unknown(n)
		}
	}
}

func (r Ready) appendFields(e *encoder) {
	e.int(1, int64(r.PID))
	e.int(2, int64(r.LandlockABI))
	e.flag(3, r.Seccomp)
	e.strs(4, r.Layers)
}

func (r *Ready) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			r.PID = d.int()
		case 2:
			r.LandlockABI = d.int()
		case 3:
			r.Seccomp = true
		case 4:
			r.Layers = d.strs()
		default:
			d.unknown(n)
		}
	}
}

func (r Request) appendFields(e *encoder) {
	e.str(1, r.Op)
	e.strs(2, r.Argv)
	e.strs(3, r.Env)
	e.str(4, r.Dir)
	e.str(5, r.User)
	e.flag(6, r.TTY)
	e.uint(7, uint64(r.Rows))
	e.uint(8, uint64(r.Cols))
	e.flag(9, r.Stdin)
	e.int(10, r.TimeoutMS)
	e.int(11, r.MaxOutput)
	e.str(12, r.Fingerprint)
	e.str(13, r.Path)
	e.str(14, r.NewPath)
	e.uint(15, uint64(r.Mode))
	e.flag(16, r.Recursive)
	e.flag(17, r.Append)
	e.int(18, r.Limit)
	e.str(19, r.XattrPrefix)
	e.strMap(20, r.Xattrs)
	e.flag(21, r.MkdirAsRoot)
	e.str(22, r.Since)
	e.flag(23, r.MarkOnly)
	e.str(24, r.Tree)
	e.int(25, int64(r.Port))
	e.int(26, r.Window)
	e.int(27, int64(r.ChunkSize))
	e.flag(28, r.Head)
}

func (r *Request) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			r.Op = d.str()
		case 2:
			r.Argv = d.strs()
		case 3:
			r.Env = d.strs()
		case 4:
			r.Dir = d.str()
		case 5:
			r.User = d.str()
		case 6:
			r.TTY = true
		case 7:
			r.Rows = uint16(d.uint(math.MaxUint16))
		case 8:
			r.Cols = uint16(d.uint(math.MaxUint16))
		case 9:
			r.Stdin = true
		case 10:
			r.TimeoutMS = d.int64()
		case 11:
			r.MaxOutput = d.int64()
		case 12:
			r.Fingerprint = d.str()
		case 13:
			r.Path = d.str()
		case 14:
			r.NewPath = d.str()
		case 15:
			r.Mode = uint32(d.uint(math.MaxUint32))
		case 16:
			r.Recursive = true
		case 17:
			r.Append = true
		case 18:
			r.Limit = d.int64()
		case 19:
			r.XattrPrefix = d.str()
		case 20:
			r.Xattrs = d.strMap()
		case 21:
			r.MkdirAsRoot = true
		case 22:
			r.Since = d.str()
		case 23:
			r.MarkOnly = true
		case 24:
			r.Tree = d.str()
		case 25:
			r.Port = d.int()
		case 26:
			r.Window = d.int64()
		case 27:
			r.ChunkSize = d.int()
		case 28:
			r.Head = true
		default:
			d.unknown(n)
		}
	}
}

func (en Entry) appendFields(e *encoder) {
	e.str(1, en.Name)
	e.int(2, en.Size)
	e.uint(3, uint64(en.Mode))
	e.int(4, en.ModTime)
	e.str(5, en.Link)
	e.str(6, en.Owner)
	e.str(7, en.Group)
	e.strMap(8, en.Xattrs)
}

func (en *Entry) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			en.Name = d.str()
		case 2:
			en.Size = d.int64()
		case 3:
			en.Mode = uint32(d.uint(math.MaxUint32))
		case 4:
			en.ModTime = d.int64()
		case 5:
			en.Link = d.str()
		case 6:
			en.Owner = d.str()
		case 7:
			en.Group = d.str()
		case 8:
			en.Xattrs = d.strMap()
		default:
			d.unknown(n)
		}
	}
}

func (u DiskUsage) appendFields(e *encoder) {
	e.int(1, u.Used)
	e.int(2, u.Total)
}

func (u *DiskUsage) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			u.Used = d.int64()
		case 2:
			u.Total = d.int64()
		default:
			d.unknown(n)
		}
	}
}

func (c CheckpointResult) appendFields(e *encoder) {
	e.str(1, c.Baseline)
	e.flag(2, c.Full)
	e.int(3, c.Entries)
	e.int(4, c.Bytes)
	e.int(5, c.Walked)
}

func (c *CheckpointResult) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			c.Baseline = d.str()
		case 2:
			c.Full = true
		case 3:
			c.Entries = d.int64()
		case 4:
			c.Bytes = d.int64()
		case 5:
			c.Walked = d.int64()
		default:
			d.unknown(n)
		}
	}
}

func (r Result) appendFields(e *encoder) {
	e.str(1, r.Outcome)
	e.int(2, int64(r.ExitCode))
	e.int(3, int64(r.Signal))
	e.str(4, r.Error)
	e.str(5, r.Errno)
	e.str(6, r.NotStarted)
	e.int(7, r.WallMS)
	e.int(8, r.UserMS)
	e.int(9, r.SystemMS)
	e.int(10, r.MaxRSSKB)
	e.str(11, r.Fingerprint)
	e.msgs(12, len(r.Entries), func(i int) Message { return r.Entries[i] })
	if r.Disk != nil {
		e.msg(13, true, *r.Disk)
	}
	if r.Checkpoint != nil {
		e.msg(14, true, *r.Checkpoint)
	}
}

func (r *Result) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			r.Outcome = d.str()
		case 2:
			r.ExitCode = d.int()
		case 3:
			r.Signal = d.int()
		case 4:
			r.Error = d.str()
		case 5:
			r.Errno = d.str()
		case 6:
			r.NotStarted = d.str()
		case 7:
			r.WallMS = d.int64()
		case 8:
			r.UserMS = d.int64()
		case 9:
			r.SystemMS = d.int64()
		case 10:
			r.MaxRSSKB = d.int64()
		case 11:
			r.Fingerprint = d.str()
		case 12:
			d.msgs(func() Decodable { r.Entries = append(r.Entries, Entry{}); return &r.Entries[len(r.Entries)-1] })
		case 13:
			r.Disk = new(DiskUsage)
			d.msg(r.Disk, true)
		case 14:
			r.Checkpoint = new(CheckpointResult)
			d.msg(r.Checkpoint, true)
		default:
			d.unknown(n)
		}
	}
}

func (m Error) appendFields(e *encoder) { e.str(1, m.Message) }

func (m *Error) decodeFields(d *decoder) {
	for d.more() {
		switch n := d.field(); n {
		case 1:
			m.Message = d.str()
		default:
			d.unknown(n)
		}
	}
}
