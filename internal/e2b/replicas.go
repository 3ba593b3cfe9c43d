package e2b

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// One service, many replicas. Several airlock serve processes sharing one
// PostgreSQL are one E2B service: a client's requests for a sandbox may
// reach any of them. The sandbox itself stays with the replica that holds
// its record's lease (its owner: the one that made it, or took it over):
// that replica alone runs its processes table, meter, timeout and log,
// so nothing about a sandbox is decided in two places.
//
//   - Another replica that receives a request for it (control plane:
//     info, kill, timeout, connect, pause, resume, metrics, snapshot,
//     fork, network; data plane: envd and ports) relays the request,
//     unchanged, to the owner's advertised address (Options.Peer), which
//     authenticates it as it would its own. The owner's address is part
//     of its lease owner name, with a MAC under the replicas' shared key
//     (Options.SealKey): a replica relays only to an address a replica
//     holding the key advertised, so someone who can write the store but
//     lacks the key cannot make a replica send clients' keys and tokens
//     elsewhere. A data-plane request is relayed only when it carries
//     the sandbox's token (checked against the record's SHA-256 of it) or
//     a valid URL signature, or is for a port (whose own access rules the
//     owner applies): anything else is answered 502 as for an unknown
//     sandbox, without a relay.
//   - list answers from the store: this replica's sandboxes and, for the
//     others, their records (state, template, metadata, limits; the end
//     time is the one create gave).
//   - When the owner dies its lease lapses; the first replica to notice
//     (its sweep, or a request for the sandbox) takes the lease (fenced,
//     as runs' leases are) and, when its backend can reach the sandbox
//     from here (Options.Attach: the kubernetes backend's pods) and the
//     record's secrets open under the shared key, takes the sandbox over:
//     it attaches to it, with the tokens, environment and lifecycle the
//     record holds sealed, and serves it from then on. Otherwise (the
//     native backend: the sandbox was a process tree of the dead replica's
//     machine, and ended with it) the record is closed as lost.
//
// What the store holds, and so what someone who reads it (and not the
// key) gets: each sandbox's token verifiers (SHA-256 of 256-bit random
// tokens: no token), the names of create's envs (as before), and the
// sealed blob (AES-256-GCM: nothing, and no blob moved to another record
// opens). The key itself is never in the store.

// Peer is where the other replicas of the service reach this one's E2B
// listeners (Options.Peer).
type Peer struct {
	// APIURL and SandboxURL are the base URLs of the control plane and
	// the data plane, e.g. http://10.1.2.3:3000.
	APIURL, SandboxURL string
}

func (p Peer) zero() bool { return p.APIURL == "" && p.SandboxURL == "" }

// Attacher connects to a running sandbox another replica made
// (Options.Attach).
type Attacher interface {
	// Attach returns the running sandbox id, made by the backend named
	// backend (a sandbox.provisioned event's) from spec; an error when
	// this backend cannot reach it or it is gone.
	Attach(ctx context.Context, backend, id string, spec sandbox.Spec) (sandbox.Sandbox, error)
}

// relayedHeader marks a request one replica relays to another: the owner
// answers it itself, never relaying it again (a client that sets it only
// keeps its request from being relayed).
const relayedHeader = "Airlock-E2b-Relayed-By"

// minSealKey is the shortest shared key taken.
const minSealKey = 32

// replicaKeys are the keys derived from the replicas' shared secret.
type replicaKeys struct {
	seal cipher.AEAD // seals a record's secrets
	mac  []byte      // authenticates an advertised address
}

func newReplicaKeys(secret []byte) (*replicaKeys, error) {
	if len(secret) == 0 {
		return nil, nil
	}
	if len(secret) < minSealKey {
		return nil, fmt.Errorf("e2b: the replicas' seal key is %d bytes, want at least %d", len(secret), minSealKey)
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	blk, err := aes.NewCipher(derive("airlock e2b seal v1"))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, err
	}
	return &replicaKeys{seal: aead, mac: derive("airlock e2b peer v1")}, nil
}

// sealPrefix starts every sealed blob: its format's version.
const sealPrefix = "v1."

// sealAD binds a sealed blob to its record and sandbox.
func sealAD(runID, id string) []byte {
	return []byte("airlock e2b sandbox\x00" + runID + "\x00" + id)
}

// seal seals v for record runID of sandbox id.
func (k *replicaKeys) sealJSON(runID, id string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, k.seal.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := k.seal.Seal(nonce, nonce, plain, sealAD(runID, id))
	return sealPrefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// maxSealed bounds a sealed blob: create's envs at their bounds and a
// template, with room.
const maxSealed = 8 << 20

// openJSON opens what sealJSON sealed for record runID of sandbox id.
func (k *replicaKeys) openJSON(runID, id, sealed string, v any) error {
	rest, ok := strings.CutPrefix(sealed, sealPrefix)
	if !ok || len(rest) > maxSealed {
		return errors.New("not a sealed blob of this version")
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) < k.seal.NonceSize()+k.seal.Overhead() {
		return errors.New("malformed sealed blob")
	}
	n := k.seal.NonceSize()
	plain, err := k.seal.Open(nil, raw[:n], raw[n:], sealAD(runID, id))
	if err != nil {
		return errors.New("the sealed blob does not open under this key for this record")
	}
	return json.Unmarshal(plain, v)
}

// ownerName is this life's lease owner: "e2b/<server id>/<nonce>", and,
// when this replica advertises an address, "@<api url>,<sandbox url>,
// <mac>", the MAC under the shared key of everything before it.
func ownerName(serverID, nonce string, peer Peer, k *replicaKeys) string {
	o := "e2b/" + serverID + "/" + nonce
	if peer.zero() || k == nil {
		return o
	}
	o += "@" + peer.APIURL + "," + peer.SandboxURL
	return o + "," + k.ownerMAC(o)
}

func (k *replicaKeys) ownerMAC(s string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil)[:12])
}

// peerOf returns the address a lease owner advertises, if it has one
// that a replica holding the shared key advertised.
func (s *Server) peerOf(owner string) (Peer, bool) {
	if s.keys == nil {
		return Peer{}, false
	}
	i := strings.LastIndexByte(owner, ',')
	if i < 0 || !strings.Contains(owner[:i], "@") {
		return Peer{}, false
	}
	if subtle.ConstantTimeCompare([]byte(owner[i+1:]), []byte(s.keys.ownerMAC(owner[:i]))) != 1 {
		return Peer{}, false
	}
	_, addrs, _ := strings.Cut(owner[:i], "@")
	api, sbx, ok := strings.Cut(addrs, ",")
	if !ok {
		return Peer{}, false
	}
	return Peer{APIURL: api, SandboxURL: sbx}, true
}

// ownerLabel is a lease owner as an answer names it: without its MAC.
func ownerLabel(owner string) string {
	if i := strings.LastIndexByte(owner, ','); i > 0 && strings.Contains(owner[:i], "@") {
		return owner[:i]
	}
	return owner
}

// tokenHash is the verifier of a token kept in the record.
func tokenHash(t string) string {
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:])
}

// hashOK compares token t with verifier want in constant time.
func hashOK(t, want string) bool {
	return t != "" && want != "" && subtle.ConstantTimeCompare([]byte(tokenHash(t)), []byte(want)) == 1
}

// sealedOf is b's sealed state, for its record.
func (s *Server) sealedOf(b *box) (string, error) {
	if s.keys == nil {
		return "", nil
	}
	return s.keys.sealJSON(b.rec.runID, b.id, stateOf(b))
}

// recordIndex is the store's live sandbox records, by sandbox id, as this
// replica last listed them.
type recordIndex struct {
	// listing is held while the store is listed: one listing at a time,
	// which every request that waits for it shares.
	listing sync.Mutex

	mu sync.Mutex
	// at is when the last listing began: it shows every record made
	// before.
	at time.Time
	// byID holds the running and paused records by sandbox id.
	byID map[string]store.Run
	// created caches records' sandbox.created events (they never
	// change), by run id.
	created map[string]*event.SandboxCreated
}

// indexStale is how old an index answers a hit (so a new owner after a
// takeover is seen within it); a miss, and a listing, want one that began
// after the request came.
const indexStale = time.Second

// sandboxOfTask returns the sandbox id a sandbox record's task names
// (openRecord's "E2B sandbox <id>, template <name>").
func sandboxOfTask(task string) string {
	rest, ok := strings.CutPrefix(task, "E2B sandbox ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ",")
	return id
}

// freshIndex makes the index one whose listing began at since or later:
// it lists the store, unless another request's listing that began since
// did; concurrent requests share one listing.
func (s *Server) freshIndex(ctx context.Context, since time.Time) error {
	x := &s.index
	x.listing.Lock()
	defer x.listing.Unlock()
	x.mu.Lock()
	done := !x.at.Before(since)
	x.mu.Unlock()
	if done {
		return nil
	}
	began := s.now()
	recs, err := s.sandboxRecords(ctx, event.StatusRunning, event.StatusPaused)
	if err != nil {
		return err
	}
	m := make(map[string]store.Run, len(recs))
	runs := make(map[string]bool, len(recs))
	for _, r := range recs {
		if id := sandboxOfTask(r.Task); id != "" {
			m[id] = r
			runs[r.ID] = true
		}
	}
	x.mu.Lock()
	x.byID, x.at = m, began
	for runID := range x.created {
		if !runs[runID] {
			delete(x.created, runID)
		}
	}
	x.mu.Unlock()
	return nil
}

// recordOf returns the live record of sandbox id: from the index when it
// is there and recent, else from a listing begun after this call.
func (s *Server) recordOf(ctx context.Context, id string) (store.Run, bool) {
	now := s.now()
	x := &s.index
	x.mu.Lock()
	r, ok := x.byID[id]
	age := now.Sub(x.at)
	x.mu.Unlock()
	if ok && age < indexStale {
		return r, ok
	}
	if err := s.freshIndex(ctx, now); err != nil {
		s.log.Warn("e2b: list sandbox records", "err", err)
		return r, ok
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	r, ok = x.byID[id]
	return r, ok
}

// createdOf returns record r's sandbox.created event.
func (s *Server) createdOf(ctx context.Context, r store.Run) (*event.SandboxCreated, error) {
	x := &s.index
	x.mu.Lock()
	c := x.created[r.ID]
	x.mu.Unlock()
	if c != nil {
		return c, nil
	}
	evs, err := s.o.Store.Events(ctx, r.ID, 1, 1)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 || evs[0].Type != event.TypeSandboxCreated {
		return nil, errors.New("its log does not start with sandbox.created")
	}
	p, err := evs[0].Unpack()
	if err != nil {
		return nil, err
	}
	c = p.(*event.SandboxCreated)
	if sandboxOfTask(r.Task) != c.SandboxID {
		return nil, errors.New("its task and its sandbox.created name different sandboxes")
	}
	x.mu.Lock()
	if x.created == nil {
		x.created = map[string]*event.SandboxCreated{}
	}
	x.created[r.ID] = c
	x.mu.Unlock()
	return c, nil
}

// relayAPI relays a control-plane request for sandbox id of tenant, which
// this replica does not hold, to the replica that does, and reports
// whether it answered the request (else it is answered here, as for a
// sandbox this replica does not know).
func (s *Server) relayAPI(w http.ResponseWriter, r *http.Request, tenant, id string) bool {
	rec, ok := s.recordOf(r.Context(), id)
	if !ok || rec.Tenant != tenant {
		return false
	}
	if r.Header.Get(relayedHeader) != "" {
		// Relayed here by a replica that found this one the holder: it
		// may be taking the sandbox over this moment (handover.go).
		s.awaitTakeover(r.Context(), rec.ID)
		return false
	}
	return s.relay(w, r, rec, id, false)
}

// relayEnvd relays a data-plane request for port of sandbox id, which
// this replica does not hold, to the replica that does, if the request
// may reach it (envd: the sandbox's token or URL signature; a port: any,
// the owner applies the port's rules); it reports whether it answered.
func (s *Server) relayEnvd(w http.ResponseWriter, r *http.Request, id string, port int) bool {
	rec, ok := s.recordOf(r.Context(), id)
	if !ok {
		return false
	}
	if r.Header.Get(relayedHeader) != "" {
		s.awaitTakeover(r.Context(), rec.ID) // as in relayAPI
		return false
	}
	if port == EnvdPort {
		c, err := s.createdOf(r.Context(), rec)
		if err != nil {
			s.log.Warn("e2b: read a sandbox record", "run_id", rec.ID, "err", err)
			return false
		}
		if !s.remoteAuthorized(r, rec, c) {
			return false
		}
	}
	return s.relay(w, r, rec, id, true)
}

// remoteAuthorized checks a data-plane request for another replica's
// sandbox: its token against the record's verifier, or its URL signature
// against the token sealed in the record.
func (s *Server) remoteAuthorized(r *http.Request, rec store.Run, c *event.SandboxCreated) bool {
	if t := r.Header.Get("X-Access-Token"); t != "" {
		return hashOK(t, c.TokenSHA256)
	}
	if r.URL.Path != "/files" || s.keys == nil || c.Sealed == "" {
		return false
	}
	var st boxState
	if err := s.keys.openJSON(rec.ID, c.SandboxID, c.Sealed, &st); err != nil || !hashOK(st.Token, c.TokenSHA256) {
		return false
	}
	return s.signatureOK(r, &box{token: st.Token})
}

// relay sends r to the owner of record rec (sandbox id) and reports
// whether it answered r: false when this replica should answer it as for
// a sandbox it does not know (no owner, or one whose lease lapsed and the
// sandbox was closed as lost or taken over here).
func (s *Server) relay(w http.ResponseWriter, r *http.Request, rec store.Run, id string, envd bool) bool {
	s.awaitTakeover(r.Context(), rec.ID)
	owner := rec.LeaseOwner
	if owner == "" || s.ours(owner) {
		return false // no one's, or this server's own (an earlier life's)
	}
	if rec.Status == event.StatusRunning && !rec.LeaseExpires.After(s.now()) {
		// Its owner stopped renewing: take it over (or close it) now,
		// rather than at the next sweep.
		s.takeOver(r.Context(), rec)
		s.invalidateIndex()
		if s.holds(id) {
			return false // taken over: served here
		}
		// Closed as lost, or still (again) another's: as the store
		// says now.
		var ok bool
		if rec, owner, ok = s.reread(r.Context(), rec.ID); !ok {
			return false
		}
	}
	if rec.Status == event.StatusPaused {
		taken, lost := s.takeOverPaused(r.Context(), rec, owner)
		if taken {
			// Its replica is gone: paused, this server's now (handover.go).
			s.invalidateIndex()
			return false
		}
		if lost {
			// Another replica took it over at the same moment: relay to
			// it, or answer as the store says now.
			var ok bool
			if rec, owner, ok = s.reread(r.Context(), rec.ID); !ok {
				return false
			}
		}
	}
	fail := func(status int, msg string) bool {
		s.audit.record(Record{Tenant: rec.Tenant, Sandbox: id, Op: "relay", Outcome: "unavailable", Detail: clipDetail(msg)})
		switch {
		case !envd:
			writeAPIError(w, status, msg)
		case isConnectPath(r.URL.Path):
			writeUnaryError(w, status, rpcErrorf(codeUnavailable, "%s", msg))
		default:
			writeEnvdError(w, status, msg)
		}
		return true
	}
	peer, ok := s.peerOf(owner)
	if !ok {
		return fail(http.StatusServiceUnavailable, fmt.Sprintf("sandbox %s is held by another replica of this service (%s), which advertises no address this replica can relay to (every replica needs e2b.advertise_host and the same e2b.seal_key_file); send the request to that replica", id, ownerLabel(owner)))
	}
	base := peer.APIURL
	if envd {
		base = peer.SandboxURL
	}
	target, err := url.Parse(base)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return fail(http.StatusServiceUnavailable, fmt.Sprintf("sandbox %s is held by replica %s, whose advertised address is malformed", id, ownerLabel(owner)))
	}
	relayTo(target, s.relayTransport, ownerLabel(s.owner), func(err error) {
		fail(http.StatusServiceUnavailable, fmt.Sprintf("sandbox %s is held by replica %s at %s, which does not answer (%s); once its lease lapses (within %s) another replica takes the sandbox over, or closes it as lost", id, ownerLabel(owner), base, relayReason(err), s.leaseTTL()))
	}).ServeHTTP(w, r)
	return true
}

// reread returns record runID as the store says now and its owner; ok
// is false when this replica should answer as for a sandbox it does not
// know: the record unreadable or final, no one's, or this server's own.
func (s *Server) reread(ctx context.Context, runID string) (rec store.Run, owner string, ok bool) {
	cur, err := s.o.Store.GetRun(ctx, runID)
	if err != nil || cur.Status.Final() || cur.LeaseOwner == "" || s.ours(cur.LeaseOwner) {
		return store.Run{}, "", false
	}
	return cur, cur.LeaseOwner, true
}

// relayTo returns the handler that relays a request, unchanged but for
// relayedHeader (set to from), to target over transport, and its answer
// back as it comes; failed answers (on the handler's writer) a request
// target did not. The relay is full duplex: the request's body goes on
// while the answer comes. Without it an HTTP/1 server consumes and closes
// the request's body as the answer begins (a process's start event can
// come before the transport's last read of the body), the transport's
// read fails, it closes the connection, and the answer is cut short.
func relayTo(target *url.URL, transport http.RoundTripper, from string, failed func(error)) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The data plane routes by Host <port>-<id>.<domain>, or by
			// the routing headers, which go on unchanged.
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(relayedHeader, from)
		},
		Transport:     transport,
		FlushInterval: -1, // streams (process output, watches) as they come
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			failed(err)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTP/2 is full duplex already; an HTTP/1 connection is, when
		// asked.
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}

// relayReason is a relay's error without the request's URL.
func relayReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Err != nil {
		return ne.Op + ": " + ne.Err.Error()
	}
	return clipDetail(err.Error())
}

func newRelayTransport() *http.Transport {
	return &http.Transport{
		// Replicas reach each other directly, never through an
		// environment's proxy.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a stream's headers come when its process starts
		ForceAttemptHTTP2:     false,
	}
}

// invalidateIndex makes the next lookup list the store again.
func (s *Server) invalidateIndex() {
	s.index.mu.Lock()
	s.index.at = time.Time{}
	s.index.mu.Unlock()
}

// remoteListed returns tenant's sandboxes held by other replicas, as
// their records tell them.
func (s *Server) remoteListed(ctx context.Context, tenant string) []listedJSON {
	// Listed afresh: a listing tells states, which a pause or a resume
	// through another replica changed a moment ago.
	if err := s.freshIndex(ctx, s.now()); err != nil {
		s.log.Warn("e2b: list sandbox records", "err", err)
	}
	s.index.mu.Lock()
	var recs []store.Run
	for id, r := range s.index.byID {
		if r.Tenant == tenant && !s.holds(id) {
			recs = append(recs, r)
		}
	}
	s.index.mu.Unlock()
	var out []listedJSON
	for _, r := range recs {
		if r.LeaseOwner == "" || s.ours(r.LeaseOwner) {
			continue // no replica's, or closed at this server's start
		}
		c, err := s.createdOf(ctx, r)
		if err != nil {
			s.log.Warn("e2b: read a sandbox record", "run_id", r.ID, "err", err)
			continue
		}
		state, end := stateRunning, r.Created.Add(time.Duration(c.TimeoutMS)*time.Millisecond)
		if r.Status == event.StatusPaused {
			state, end = statePaused, r.Updated
		}
		out = append(out, listedJSON{
			SandboxID: c.SandboxID, TemplateID: c.Template, ClientID: clientID, StartedAt: r.Created.UTC(), EndAt: end.UTC(),
			CPUCount: max(1, int(c.CPUs+0.999)), MemoryMB: c.MemoryBytes >> 20, DiskSizeMB: c.DiskBytes >> 20, EnvdVersion: EnvdVersion,
			State: state, Metadata: c.Metadata,
		})
	}
	return out
}

// adopt takes over running record r, whose lease this server holds now
// (token), when the sandbox can be reached from here (Options.Attach) and
// the record's secrets open under the shared key; it reports whether it
// did (else the caller closes the record as lost).
func (s *Server) adopt(ctx context.Context, r store.Run, token int64) bool {
	if s.o.Attach == nil || s.keys == nil {
		return false
	}
	c, err := s.createdOf(ctx, r)
	if err != nil || c.Sealed == "" {
		return false
	}
	var st boxState
	if err := s.keys.openJSON(r.ID, c.SandboxID, c.Sealed, &st); err != nil {
		s.log.Warn("e2b: the record's secrets do not open: not taking the sandbox over", "run_id", r.ID, "sandbox_id", c.SandboxID, "err", err)
		return false
	}
	if !hashOK(st.Token, c.TokenSHA256) || !hashOK(st.Traffic, c.TrafficSHA256) {
		s.log.Warn("e2b: the record's sealed tokens do not match its verifiers: not taking the sandbox over", "run_id", r.ID)
		return false
	}
	prov, last, err := s.lastProvisioned(ctx, r.ID)
	if err != nil || prov == nil {
		return false
	}
	tpl, err := st.templateOf(c, r.Policy)
	if err != nil {
		return false
	}
	b := &box{
		id: c.SandboxID, tenant: r.Tenant, keyID: c.KeyID, template: tpl, metadata: c.Metadata, started: r.Created, internet: c.Internet,
		rec: s.newRecord(r.ID, last+1), status: event.StatusRunning, lease: token,
	}
	if err := st.onto(b); err != nil {
		return false
	}
	b.spec = withAccount(s.specOf(tpl.doc))
	if err := s.applyTemplate(ctx, tpl, &b.spec); err != nil {
		s.log.Warn("e2b: take a sandbox over: its template", "sandbox_id", b.id, "err", err)
		return false
	}
	spec := b.spec
	spec.Env = append([]string(nil), spec.Env...)
	release, err := s.network(ctx, b, &spec)
	if err != nil {
		s.log.Warn("e2b: take a sandbox over: its network", "sandbox_id", b.id, "err", err)
		return false
	}
	t0 := s.now()
	sb, err := s.o.Attach.Attach(ctx, prov.Backend, prov.SandboxID, spec)
	if err != nil {
		release()
		s.log.Info("e2b: the sandbox of a lapsed lease cannot be reached from this replica", "sandbox_id", b.id, "backend", prov.Backend, "err", err)
		return false
	}
	lv := &live{sb: sb, release: release, procs: newProcTable(), ending: make(chan struct{})}
	// One log across replicas: it starts from what the store holds.
	b.events = s.newEventLog(ctx, b, true)
	s.watch(ctx, b, lv)
	now := s.now()
	_, err = b.rec.commit(ctx, "", "",
		event.RunResumed{Reason: "takeover", FromSeq: b.rec.last(), Host: ownerLabel(s.owner), Note: "its replica stopped renewing its lease; the processes started through it ended with it"},
		event.SandboxProvisioned{Sandbox: b.id, SandboxID: sb.ID(), Backend: sb.Info().Backend, DurationMS: now.Sub(t0).Milliseconds()})
	if err != nil {
		s.destroyDetached(ctx, lv)
		s.log.Warn("e2b: take a sandbox over: its record", "sandbox_id", b.id, "err", err)
		return false
	}
	end := r.Created.Add(time.Duration(c.TimeoutMS) * time.Millisecond)
	b.meter = meterState{at: now}
	b.state, b.live, b.endAt = stateRunning, lv, end
	s.mu.Lock()
	if s.closed || s.boxes[b.id] != nil {
		s.mu.Unlock()
		s.destroyDetached(ctx, lv)
		return true
	}
	s.boxes[b.id] = b
	s.mu.Unlock()
	s.log.Info("e2b: took over a sandbox whose replica stopped", "sandbox_id", b.id, "run_id", r.ID, "pod", sb.ID(), "attach_ms", now.Sub(t0).Milliseconds())
	s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.takeover", Outcome: "ok", Run: r.ID})
	return true
}

// leaveRunning leaves running sandbox b to another replica as this server
// shuts down (a rolling update's SIGTERM), instead of ending it, when one
// can take it over: its backend's sandboxes outlive this host's
// connection (the kubernetes backend's pods: detacher) and the replicas
// share the key its record's secrets are sealed under. Its usage so far
// is recorded and debited, a sandbox.handover op ends this server's part
// of its log, the connection is dropped with the sandbox left running
// (the processes started through it end with their streams), and the
// record's lease is released: another replica's sweep takes it over at
// its next tick (adopt), not once the lease lapses. It reports whether it
// did; the caller ends b otherwise.
func (s *Server) leaveRunning(ctx context.Context, b *box) bool {
	if s.o.Attach == nil || s.keys == nil {
		return false
	}
	b.life.Lock()
	defer b.life.Unlock()
	b.mu.Lock()
	lv := b.live
	detaches := false
	if lv != nil {
		_, detaches = lv.sb.(detacher)
	}
	if b.state != stateRunning || !detaches || b.status.Final() {
		b.mu.Unlock()
		return false
	}
	// Ended here: a request meanwhile finds no sandbox on this server,
	// and its relay finds the record's next owner.
	b.state, b.live = stateKilled, nil
	b.mu.Unlock()
	s.mu.Lock()
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
	s.mu.Unlock()
	s.sbxLimit.Forget(b.id)
	u, _ := s.usage(b, lv, b.meter, s.now(), false)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stored, err := b.rec.commit(cctx, "", "", u, event.SandboxOp{Op: "sandbox.handover", Outcome: "ok", Detail: "its server shut down: left running for another replica to take over"})
	if err != nil {
		s.log.Warn("e2b: record a sandbox's handover", "sandbox_id", b.id, "err", err)
	} else {
		s.debit(cctx, b, stored[0].Seq, u.CostMicroCredits)
	}
	s.destroyDetached(cctx, lv)
	lv.procs.closeAll()
	if b.events != nil {
		b.events.End()
	}
	// Released only once the record holds all this server wrote: the
	// next owner reads its log from the store. A release that fails
	// leaves the lease to lapse (the SIGKILL case's takeover).
	if err := s.o.Store.ReleaseLease(cctx, b.rec.runID, s.owner, b.lease); err != nil {
		s.log.Warn("e2b: release a handed-over sandbox's lease", "sandbox_id", b.id, "err", err)
	}
	s.log.Info("e2b: left a sandbox running for another replica", "sandbox_id", b.id, "run_id", b.rec.runID)
	s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.handover", Outcome: "ok", Run: b.rec.runID})
	return true
}

// detacher is a sandbox whose connection this host may drop without
// ending it (the kubernetes backend's).
type detacher interface {
	Detach()
}

// destroyDetached drops lv's connection without ending the sandbox when
// it can (another replica may hold it), else ends it.
func (s *Server) destroyDetached(ctx context.Context, lv *live) {
	if d, ok := lv.sb.(detacher); ok {
		lv.unwatch()
		d.Detach()
		lv.release()
		return
	}
	s.destroy(ctx, lv)
}

// lastProvisioned returns record runID's last sandbox.provisioned event
// and the seq of its last event.
func (s *Server) lastProvisioned(ctx context.Context, runID string) (*event.SandboxProvisioned, int64, error) {
	var (
		prov *event.SandboxProvisioned
		last int64
	)
	err := s.eachEventOf(ctx, runID, func(e event.Event) {
		last = e.Seq
		if e.Type != event.TypeSandboxProvisioned {
			return
		}
		if p, err := e.Unpack(); err == nil {
			prov = p.(*event.SandboxProvisioned)
		}
	})
	return prov, last, err
}
