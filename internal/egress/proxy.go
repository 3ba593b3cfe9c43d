package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress/guard"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
)

// ReasonHeader is the response header that says why the proxy refused a
// request (on 403, 400 and 431) or could not complete it (502, 504). Values are short
// and machine-readable: "policy:no_rule", "policy:port", "policy:method",
// "policy:path", "policy:ask_unavailable", "policy:ask_rejected",
// "guard:<reason>" (e.g. "guard:link_local"), "sni_mismatch", "not_tls",
// "host_mismatch", "credential_not_bound_to_host", "credential_unavailable",
// "limit:conns", "limit:bytes_out", "limit:bytes_in",
// "limit:request_header", "bad_request:<what>", "upstream:<what>".
const ReasonHeader = "X-Airlock-Deny-Reason"

// Secrets is where the proxy fetches credential values, once per request so
// rotation takes effect at once. *secret.Store satisfies it.
type Secrets interface {
	Get(ctx context.Context, tenant, name string) (secret.Value, secret.Info, error)
}

// Approver decides requests the policy answers with ask. Ask blocks until a
// decision; ctx is canceled when the sandbox gives up on the request (closes
// the connection) or the proxy closes. An error denies.
type Approver interface {
	Ask(ctx context.Context, id bridge.Identity, r policy.Request) (bool, error)
}

// Limits bound what one sandbox can make the proxy do. A zero field takes its
// DefaultLimits value, except MaxBytesOut and MaxBytesIn, where 0 means
// unlimited.
type Limits struct {
	// MaxConns is the number of client connections open at once (each
	// tunnel is one). Connections beyond it get 403 "limit:conns".
	MaxConns int
	// MaxHeaderBytes bounds the request header block from the sandbox
	// (431 "limit:request_header") and the response header block from an
	// upstream (502 "limit:response_header").
	MaxHeaderBytes int
	// IdleTimeout ends a client connection that waits this long for the
	// next request, whose request body stalls this long, or that does not
	// take a response chunk for this long, and a tunnel with no bytes in
	// either direction for this long. (A slow upstream is bounded by
	// TotalTimeout only: an API may think for minutes.)
	IdleTimeout time.Duration
	// TotalTimeout ends any client connection (and the tunnel or requests
	// on it) this long after it was accepted.
	TotalTimeout time.Duration
	// MaxBytesOut and MaxBytesIn bound the bytes received from (out) and
	// sent to (in) the sandbox over the proxy's life, counted on the
	// sandbox's connections, protocol included. When one is reached, new
	// requests get 403 "limit:bytes_out"/"limit:bytes_in" and open
	// connections are cut. They may be overshot by at most one read or
	// write buffer per connection.
	MaxBytesOut, MaxBytesIn int64
}

// DefaultLimits returns the limits used for zero fields of Config.Limits.
func DefaultLimits() Limits {
	return Limits{
		MaxConns:       256,
		MaxHeaderBytes: 64 << 10,
		IdleTimeout:    5 * time.Minute,
		TotalTimeout:   time.Hour,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.TotalTimeout <= 0 {
		l.TotalTimeout = d.TotalTimeout
	}
	return l
}

// Config configures a Proxy.
type Config struct {
	// Identity names the sandbox this Proxy serves; all three fields are
	// required and go into every audit Record.
	Identity bridge.Identity
	// Policy is the run's network policy (required, already validated).
	Policy *policy.Network
	// Secrets provides credential values, looked up under
	// Identity.Tenant: a sandbox's proxy sends its own tenant's secrets
	// only. May be nil when Policy binds no credentials; a request that
	// needs one is then refused.
	Secrets Secrets
	// Redactor receives every injected value (and its encoded forms), so
	// the rest of the host scrubs them too; the proxy scrubs echoes with
	// it. Values are never removed: an echo may outlive the request. nil
	// means a private Redactor.
	Redactor *secret.Redactor
	// Audit receives one Record per decision (required).
	Audit AuditSink
	// Limits for this sandbox; zero fields take DefaultLimits.
	Limits Limits
	// Resolver resolves names on the host; nil means net.DefaultResolver.
	Resolver guard.Resolver
	// Approver answers default: ask. nil denies with "policy:ask_unavailable".
	Approver Approver
	// Logger receives diagnostics (upstream errors, scrubbed of secrets).
	// nil discards them.
	Logger *slog.Logger
	// Local serves the host's own endpoints (the LLM gateway) to the
	// sandbox: every origin-form request (a request line like "POST
	// /llm/openai/v1/chat/completions", neither CONNECT nor absolute-form)
	// outside a tunnel goes to it. The request's context carries this
	// Proxy's Identity (bridge.IdentityFrom) and ends with the connection's
	// TotalTimeout or Close; the body is read under IdleTimeout and every
	// byte either way counts against the byte budgets. The ResponseWriter
	// implements http.Flusher: each Flush sends what was written at once.
	// Local must not keep the request or the writer after it returns.
	// nil refuses such requests with 400 "bad_request:origin_form".
	Local http.Handler
	// Narrow, when set, may refuse a connection Policy allows: it is asked
	// about every address the proxy would connect to, with the host the
	// policy judged, at each connection (so rules it reads may change
	// while the proxy runs). True refuses: 403 "guard:sandbox_rule". It
	// can only narrow Policy, never widen it. Must be safe for concurrent
	// use. With it, upstream connections are not kept alive between
	// requests, so each request meets the rules of its time.
	Narrow func(host string, a netip.Addr) bool
}

// Stats are running totals of a Proxy.
type Stats struct {
	// Conns is the number of client connections open now.
	Conns int64
	// Allowed and Denied count decisions (asked-and-approved counts as
	// allowed).
	Allowed, Denied int64
	// BytesIn and BytesOut are bytes sent to and received from the
	// sandbox.
	BytesIn, BytesOut int64
}

const (
	// dialTimeout bounds resolving and connecting to an upstream.
	dialTimeout = 15 * time.Second
	// tlsHandshakeTimeout bounds the upstream TLS handshake.
	tlsHandshakeTimeout = 15 * time.Second
	// maxRejecting bounds the goroutines answering connections over
	// MaxConns with a 403; beyond it such connections are just closed.
	maxRejecting = 16
	// rejectTimeout bounds how long an over-limit connection may take to
	// send its request head.
	rejectTimeout = 5 * time.Second
)

// Proxy is the egress proxy of one sandbox. Create it with New, serve it
// with Serve, stop it with Close. Its methods are safe for concurrent use.
type Proxy struct {
	id        bridge.Identity
	pol       *policy.Network
	secrets   Secrets
	redactor  *secret.Redactor
	audit     AuditSink
	lim       Limits
	approver  Approver
	log       *slog.Logger
	local     http.Handler
	ca        *authority
	dialer    *guard.Dialer
	transport *http.Transport

	conns, allowed, denied, bytesIn, bytesOut atomic.Int64
	rejecting                                 atomic.Int64

	injectedMu sync.Mutex
	// injected is guarded by injectedMu: the values (by content) already
	// given to the redactor, so each is added once.
	injected map[string]bool

	mu sync.Mutex
	// closed, listeners, cancels are guarded by mu.
	closed    bool
	listeners map[net.Listener]context.CancelFunc
	// serving counts running Serve calls; Close waits for them.
	serving sync.WaitGroup
}

// New checks cfg and builds a Proxy: a fresh per-run CA, the address guard
// (lifted only for the policy's CIDR rules and pins) and an upstream
// connection pool that trusts the system roots plus Policy.UpstreamCA.
// New starts no goroutine.
func New(cfg Config) (*Proxy, error) {
	var errs []error
	if cfg.Identity.Tenant == "" || cfg.Identity.Run == "" || cfg.Identity.Sandbox == "" {
		errs = append(errs, errors.New("egress: config: Identity needs Tenant, Run and Sandbox"))
	}
	if cfg.Policy == nil {
		errs = append(errs, errors.New("egress: config: Policy is required"))
	}
	if cfg.Audit == nil {
		errs = append(errs, errors.New("egress: config: Audit is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	roots, err := upstreamRoots(cfg.Policy.UpstreamCA)
	if err != nil {
		return nil, err
	}
	ca, err := newAuthority(cfg.Identity.Run, time.Now())
	if err != nil {
		return nil, err
	}
	g, err := guard.NewGuard(cfg.Policy.AllowsAddr)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	p := &Proxy{
		id:        cfg.Identity,
		pol:       cfg.Policy,
		secrets:   cfg.Secrets,
		redactor:  cfg.Redactor,
		audit:     cfg.Audit,
		lim:       cfg.Limits.withDefaults(),
		approver:  cfg.Approver,
		log:       cfg.Logger,
		local:     cfg.Local,
		ca:        ca,
		injected:  make(map[string]bool),
		listeners: make(map[net.Listener]context.CancelFunc),
	}
	if p.redactor == nil {
		p.redactor = secret.NewRedactor()
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("tenant", p.id.Tenant, "run_id", p.id.Run, "sandbox_id", p.id.Sandbox)
	p.dialer = &guard.Dialer{
		Guard:    g,
		Resolver: cfg.Resolver,
		Pin:      cfg.Policy.Pinned,
		Timeout:  dialTimeout,
		Narrow:   cfg.Narrow,
	}
	p.transport = &http.Transport{
		// Never an environment proxy: the upstream is dialled here.
		Proxy:       nil,
		DialContext: p.dialUpstream,
		TLSClientConfig: &tls.Config{
			RootCAs:    roots,
			MinVersion: tls.VersionTLS12,
		},
		// An empty map keeps HTTP/2 off: the proxy forwards HTTP/1.1.
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		DisableCompression:     true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        min(p.lim.IdleTimeout, 90*time.Second),
		MaxResponseHeaderBytes: int64(p.lim.MaxHeaderBytes),
		// Narrow is asked when a connection is dialled; an idle upstream
		// connection reused would carry a request past rules that
		// changed since, so with Narrow each request dials afresh.
		DisableKeepAlives: cfg.Narrow != nil,
	}
	return p, nil
}

// upstreamRoots returns the system roots plus the certificates in the PEM
// file at path (if any). A named file that holds no certificate is an error:
// silently trusting less than the policy says would only show up as TLS
// failures much later.
func upstreamRoots(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if path == "" {
		return pool, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("egress: upstream_ca: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("egress: upstream_ca %s: no certificate found", path)
	}
	return pool, nil
}

// CACertPEM returns the per-run CA certificate in PEM form, for the
// sandbox's trust store. The private key is never exposed.
func (p *Proxy) CACertPEM() []byte {
	return append([]byte(nil), p.ca.certPEM...)
}

// Stats returns the running totals.
func (p *Proxy) Stats() Stats {
	return Stats{
		Conns:    p.conns.Load(),
		Allowed:  p.allowed.Load(),
		Denied:   p.denied.Load(),
		BytesIn:  p.bytesIn.Load(),
		BytesOut: p.bytesOut.Load(),
	}
}

// ErrClosed is returned by Serve when called on a closed Proxy.
var ErrClosed = errors.New("egress: proxy closed")

// Serve accepts connections on l and serves each as coming from this
// Proxy's sandbox. It returns nil once Close was called (after its
// connections have ended), or the accept error that stopped it, after
// ending its connections. Serve owns l and closes it.
func (p *Proxy) Serve(l net.Listener) error {
	// Serve is the root of this listener's connections: Close cancels ctx.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Runs last: connections end (cancel closes them) before Serve returns.
	defer wg.Wait()
	defer cancel()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = l.Close()
		return ErrClosed
	}
	p.listeners[l] = cancel
	p.serving.Add(1)
	p.mu.Unlock()
	defer p.serving.Done()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		_ = l.Close()
	}()

	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors or a transient error: back off
				// like net/http rather than spin or give up.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return nil
				}
				continue
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		delay = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.serveConn(ctx, c)
		}()
	}
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops every Serve, closes the listeners and every open connection
// and tunnel, and waits until they are gone. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var errs []error
	for l, cancel := range p.listeners {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("egress: close listener: %w", err))
		}
		cancel()
	}
	p.mu.Unlock()
	p.serving.Wait()
	p.transport.CloseIdleConnections()
	return errors.Join(errs...)
}

// record completes r with the identity and counts it.
func (p *Proxy) record(r Record) {
	r.Tenant, r.Run, r.Sandbox = p.id.Tenant, p.id.Run, p.id.Sandbox
	if r.Decision == DecisionDenied {
		p.denied.Add(1)
	} else {
		p.allowed.Add(1)
	}
	p.audit.Record(r)
}

// logErr logs a diagnostic with err scrubbed of every known secret value.
func (p *Proxy) logErr(msg string, err error, args ...any) {
	args = append(args, "err", p.redactor.String(err.Error()))
	p.log.Debug(msg, args...)
}

// hostPort joins host and port for a URL or dial address, leaving out the
// scheme's default port.
func hostPort(scheme, host string, port int) string {
	if scheme == "http" && port == 80 || scheme == "https" && port == 443 {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
