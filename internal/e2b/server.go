package e2b

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// EnvdVersion is the envd version this server reports. The SDKs switch
// features on it: 0.5.7 means the default user is chosen server-side,
// stdin may be off, stdin can be closed, and uploads may be
// octet-stream; file metadata (0.6.2) is not offered.
const EnvdVersion = "0.5.7"

// EnvdPort is the port the SDKs address envd on.
const EnvdPort = 49983

// Keys verifies control-plane API keys; *auth.Keys satisfies it.
type Keys interface {
	Verify(ctx context.Context, key string) (auth.Principal, error)
}

// Options are what a Server is built from.
type Options struct {
	// Config tunes the API; zero fields take their defaults.
	Config Config
	// Backend creates the sandboxes (required).
	Backend sandbox.Backend
	// Keys verifies API keys (required).
	Keys Keys
	// Store holds the tenants' named policies, which templates name
	// (required).
	Store store.Store
	// Network attaches the egress proxy of a sandbox whose policy allows
	// any egress; nil gives every sandbox no network at all. Attachments
	// carry the sandbox's id as the run id ("e2b-" + id), its tenant,
	// and its template's policy document.
	Network engine.Network
	// TrustTenantPolicies lets templates name host resources (see
	// policy.Document.HostResources); only for a server whose tenants are all trusted
	// with the host.
	TrustTenantPolicies bool
	// StateDir holds paused sandboxes' workspace snapshots (required).
	StateDir string
	// Audit receives one JSON line per operation; nil records nothing.
	Audit io.Writer
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server serves the E2B control plane (APIHandler) and data plane
// (SandboxHandler). Run must be running for sandboxes' timeouts to be
// kept; its return destroys every sandbox.
type Server struct {
	o     Options
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	audit *auditLog
	api   http.Handler
	envd  http.Handler

	mu sync.Mutex
	// boxes is guarded by mu: every sandbox, running or paused, by id.
	boxes map[string]*box
	// closed is guarded by mu: set once Run ends; no sandbox is created
	// after.
	closed bool
	// creating is guarded by mu: sandboxes being created, per tenant,
	// counted against MaxSandboxes.
	creating map[string]int

	// work tracks goroutines the Server starts (process waiters, stdin
	// feeders); Run waits for them after destroying the sandboxes.
	work sync.WaitGroup
}

// New checks o and builds a Server.
func New(o Options) (*Server, error) {
	var errs []error
	if o.Backend == nil {
		errs = append(errs, errors.New("e2b: no sandbox backend"))
	}
	if o.Keys == nil {
		errs = append(errs, errors.New("e2b: no API keys"))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("e2b: no store"))
	}
	if o.StateDir == "" {
		errs = append(errs, errors.New("e2b: no state directory"))
	}
	cfg := o.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{o: o, cfg: cfg, log: o.Logger, now: o.Now, boxes: map[string]*box{}, creating: map[string]int{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.audit = &auditLog{now: s.now, w: o.Audit}
	s.api = s.apiRoutes()
	s.envd = http.HandlerFunc(s.serveEnvd)
	return s, nil
}

// APIHandler serves the control plane (E2B_API_URL).
func (s *Server) APIHandler() http.Handler { return s.api }

// SandboxHandler serves the data plane (E2B_SANDBOX_URL, or Host
// <port>-<id>.<domain>).
func (s *Server) SandboxHandler() http.Handler { return s.envd }

// reapEvery is how often Run looks for sandboxes past their timeout or
// gone.
const reapEvery = time.Second

// Run keeps sandboxes' timeouts until ctx ends, then destroys every
// sandbox, removes every snapshot, and returns once all the Server's
// goroutines are done.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.shutdown(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
			s.reap(ctx)
		}
	}
}

// reap kills sandboxes past their end and forgets those that died.
func (s *Server) reap(ctx context.Context) {
	now := s.now()
	s.mu.Lock()
	var due []*box
	for _, b := range s.boxes {
		due = append(due, b)
	}
	s.mu.Unlock()
	for _, b := range due {
		b.mu.Lock()
		expired := b.state == stateRunning && !now.Before(b.endAt)
		dead := b.state == stateRunning && b.live != nil && isDone(b.live.sb.Done())
		b.mu.Unlock()
		switch {
		case expired:
			s.kill(ctx, b, "timeout")
		case dead:
			s.kill(ctx, b, "lost")
		}
	}
}

// shutdown destroys every sandbox and waits for the Server's goroutines.
func (s *Server) shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	var all []*box
	for _, b := range s.boxes {
		all = append(all, b)
	}
	s.mu.Unlock()
	for _, b := range all {
		s.kill(ctx, b, "shutdown")
	}
	s.work.Wait()
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
