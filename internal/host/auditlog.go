package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// AuditLog is an append-only JSON-lines audit log ($AIRLOCK_HOME/audit/
// e2b.jsonl, mcp.jsonl, egress.jsonl) that a deletion or a retention pass
// may rewrite (rewriteAudit). Each Write appends under an exclusive flock
// of the log's lock file (PATH.lock), shared by every process and every
// AuditLog of the path, and first reopens the path if a rewrite replaced
// the file since: a line written concurrently with a rewrite is either in
// the file the rewrite read or appended to the one it renamed into place,
// never lost nor interleaved. Write one whole line per call.
type AuditLog struct {
	path string
	mu   sync.Mutex
	f    *os.File // guarded by mu
	lock *os.File
}

// OpenAuditLog opens (creating it, and its directory, 0600) the audit log
// at path for appending.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &AuditLog{path: path, f: f, lock: lock}, nil
}

// Write appends p, one whole line.
func (a *AuditLog) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return 0, os.ErrClosed
	}
	if err := flock(a.lock, syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	defer func() { _ = flock(a.lock, syscall.LOCK_UN) }()
	// A rewrite renamed another file into place: append to that one.
	cur, err := a.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	if fi, err := os.Stat(a.path); err != nil || !os.SameFile(fi, cur) {
		f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return 0, fmt.Errorf("audit log: %w", err)
		}
		a.f.Close()
		a.f = f
	}
	return a.f.Write(p)
}

// Close closes the log.
func (a *AuditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := errors.Join(a.f.Close(), a.lock.Close())
	a.f = nil
	return err
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// auditEntry is what a deletion or a retention pass reads of an audit
// line: every log's records carry their time and tenant; the egress log's
// and the E2B log's name their run.
type auditEntry struct {
	Time   time.Time `json:"time"`
	Tenant string    `json:"tenant"`
	Run    string    `json:"run"`
}

// rewriteAudit removes the lines of the audit log at path that drop
// selects (a line that does not parse is kept), by writing the rest to a
// new file renamed into place; it returns how many went. A missing log has
// none.
//
// drop may be slow (a deletion asks the store whether a line's run still
// exists), so the log is read and filtered without its lock, up to its
// last whole line, and the lock is taken only to finish: the lines
// appended since (by writers, which take the lock) are read from that
// offset and filtered under it, and the result renamed into place. If
// another rewrite replaced the file meanwhile, the offset means nothing:
// the read starts again on the new file (after maxRewriteTries, the whole
// read is done under the lock).
func rewriteAudit(path string, drop func(auditEntry) bool) (int, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	defer lock.Close()
	for try := 1; ; try++ {
		locked := try > maxRewriteTries
		if locked {
			if err := flock(lock, syscall.LOCK_EX); err != nil {
				return 0, fmt.Errorf("audit log: %w", err)
			}
		}
		n, done, err := rewriteOnce(path, lock, locked, drop)
		if locked {
			_ = flock(lock, syscall.LOCK_UN)
		}
		if err != nil || done {
			return n, err
		}
	}
}

// maxRewriteTries is how many times rewriteAudit reads a log without its
// lock before it reads it under the lock: each try lost to another
// rewrite of the same log, which is rare.
const maxRewriteTries = 3

// rewriteOnce is one try of rewriteAudit: with locked, the caller holds
// the log's lock throughout; without, it reads and filters first and
// takes the lock to finish. done is false when another rewrite replaced
// the file between the two steps.
func rewriteOnce(path string, lock *os.File, locked bool, drop func(auditEntry) bool) (n int, done bool, err error) {
	in, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("audit log: %w", err)
	}
	defer in.Close()
	var out bytes.Buffer
	// filter reads whole lines from r, keeping those drop does not
	// select in out, and returns how many bytes of whole lines it read.
	filter := func(r io.Reader) (int64, error) {
		var read int64
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				read += int64(len(line))
				var e auditEntry
				if json.Unmarshal(line, &e) == nil && drop(e) {
					n++
				} else {
					out.Write(line)
				}
			}
			if errors.Is(err, io.EOF) {
				// A line without its newline: a write under way
				// (without the lock) or a torn one; read it with the
				// rest under the lock.
				return read, nil
			}
			if err != nil {
				return read, fmt.Errorf("audit log %s: %w", path, err)
			}
		}
	}
	off, err := filter(in)
	if err != nil {
		return 0, false, err
	}
	if !locked {
		if n == 0 {
			// Nothing of what was there goes; lines appended since are
			// the next rewrite's.
			return 0, true, nil
		}
		if err := flock(lock, syscall.LOCK_EX); err != nil {
			return 0, false, fmt.Errorf("audit log: %w", err)
		}
		defer func() { _ = flock(lock, syscall.LOCK_UN) }()
		cur, err := in.Stat()
		if err != nil {
			return 0, false, fmt.Errorf("audit log: %w", err)
		}
		if fi, err := os.Stat(path); err != nil || !os.SameFile(fi, cur) {
			return 0, false, nil // another rewrite replaced it: again
		}
		// What writers appended since the read (and a line it found
		// unfinished), under the lock: whole.
		if _, err := in.Seek(off, io.SeekStart); err != nil {
			return 0, false, fmt.Errorf("audit log: %w", err)
		}
		if _, err := filter(in); err != nil {
			return 0, false, err
		}
	}
	// A last line without a newline (a torn write of a crashed writer)
	// is kept as it is.
	rest, err := io.ReadAll(in)
	if err != nil {
		return 0, false, fmt.Errorf("audit log: %w", err)
	}
	out.Write(rest)
	if n == 0 {
		return 0, true, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, false, fmt.Errorf("audit log: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is none
	if _, err := tmp.Write(out.Bytes()); err != nil {
		tmp.Close()
		return 0, false, fmt.Errorf("audit log: %w", err)
	}
	if err := errors.Join(tmp.Chmod(0o600), tmp.Sync(), tmp.Close()); err != nil {
		return 0, false, fmt.Errorf("audit log: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, false, fmt.Errorf("audit log: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return n, true, nil
}

// auditStore is what forgetAudit reads of the store: whether a line's run
// still exists, and the tenants' deletion records.
type auditStore interface {
	store.Runs
	ListDeletions(ctx context.Context, tenant string, limit int) ([]store.Deletion, error)
}

// scrubAudit rewrites every audit log under $AIRLOCK_HOME/audit (*.jsonl),
// removing the lines drop selects; it returns how many went.
func (h *Host) scrubAudit(drop func(auditEntry) bool) (int64, error) {
	paths, err := filepath.Glob(filepath.Join(h.cfg.Home, "audit", "*.jsonl"))
	if err != nil {
		return 0, fmt.Errorf("audit logs: %w", err)
	}
	var n int64
	var errs []error
	for _, p := range paths {
		k, err := rewriteAudit(p, drop)
		n += int64(k)
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// forgetAudit removes from the home's audit logs the lines of tenant
// (when not ""), those naming a run the store no longer has (purged, or
// its tenant deleted), and, when rules is not nil, those older than their
// retention as of now: their tenant's Retention.Audit when set; else a
// line naming a stored run keeps that run's (runRetention), any other its
// tenant's rule, the shorter of its events and runs settings that is set
// (an audit line holds what an event payload would: a command line, a
// path, a host). A line of a tenant written before that tenant's deletion
// (its store record, which another replica may have made) goes too.
func (h *Host) forgetAudit(ctx context.Context, st auditStore, tenant string, rules *RetentionRules, now time.Time) (int64, error) {
	type known struct {
		run store.Run
		ok  bool
	}
	runs := map[string]known{}
	docs := map[string]policy.Retention{}
	var errs []error
	lookup := func(id string) known {
		k, seen := runs[id]
		if seen {
			return k
		}
		r, err := st.GetRun(ctx, id)
		switch {
		case err == nil:
			k = known{r, true}
		case errors.Is(err, store.ErrNotFound):
		default:
			// Not known to be gone: kept.
			errs = append(errs, err)
			k = known{store.Run{ID: id}, true}
		}
		runs[id] = k
		return k
	}
	// deletedAt is when a tenant of this name was last deleted (zero:
	// never), from the store's deletion records: a tenant deleted through
	// another replica (whose home's logs that deletion scrubbed, not this
	// one's) leaves its lines here until a pass finds its record.
	deleted := map[string]time.Time{}
	deletedAt := func(name string) time.Time {
		at, seen := deleted[name]
		if seen {
			return at
		}
		recs, err := st.ListDeletions(ctx, name, 0)
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range recs {
			if d.Kind == store.DeletionTenant && d.Target == name {
				at = d.Created
				break // newest first
			}
		}
		deleted[name] = at
		return at
	}
	n, err := h.scrubAudit(func(e auditEntry) bool {
		if tenant != "" && e.Tenant == tenant {
			return true
		}
		if e.Tenant != "" && !e.Time.IsZero() {
			if at := deletedAt(e.Tenant); !at.IsZero() && e.Time.Before(at) {
				return true // written before its tenant's deletion
			}
		}
		var k known
		if e.Run != "" && event.ValidRunID(e.Run) == nil {
			if k = lookup(e.Run); !k.ok {
				return true
			}
		}
		if rules == nil || e.Time.IsZero() {
			return false
		}
		ret := rules.For(e.Tenant)
		if ret.Audit > 0 {
			// The audit log's own setting: lines expire by it alone.
			return now.Sub(e.Time) > ret.Audit
		}
		if k.ok && k.run.Tenant != "" {
			ret = runRetention(k.run, *rules, docs)
		}
		limit := ret.Events
		if limit == 0 || (ret.Runs > 0 && ret.Runs < limit) {
			limit = ret.Runs
		}
		return limit > 0 && now.Sub(e.Time) > limit
	})
	return n, errors.Join(append(errs, err)...)
}
