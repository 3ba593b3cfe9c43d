package e2b

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/portproxy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// trafficHeader carries a sandbox's traffic access token, as E2B's edge
// reads it.
const trafficHeader = "E2b-Traffic-Access-Token"

// routingHeaders are the data plane's own request headers: they name the
// sandbox and carry the host's credential for it, and never reach the
// server in the sandbox (untrusted code). X-Access-Token does reach it:
// it is that sandbox's own envd token, which its code controls anyway,
// and E2B's servers in a sandbox (the code interpreter's) read it.
var routingHeaders = []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", trafficHeader}

// trafficToken is the traffic access token create and connect tell: set
// when a port of the sandbox needs it (allowPublicTraffic: false, or a
// token rule of its policy), as E2B tells it only then.
func (b *box) trafficToken() string {
	if b.private {
		return b.traffic
	}
	for _, r := range b.template.doc.Ports.Expose {
		if r.Access == policy.AccessToken || r.Access == "" {
			return b.traffic
		}
	}
	return ""
}

// portAccess is the access of port: its policy's, made token by
// allowPublicTraffic: false; false when the policy does not expose it.
func (b *box) portAccess(port int) (policy.PortAccess, bool) {
	a, ok := b.template.doc.Ports.Access(port)
	if ok && b.private {
		a = policy.AccessToken
	}
	return a, ok
}

// portOpen reports whether r may reach port: exposed, and with the
// sandbox's traffic token where the port needs it.
func (b *box) portOpen(r *http.Request, port int) bool {
	access, exposed := b.portAccess(port)
	if access == policy.AccessToken {
		return exposed && portproxy.TokenOK(r.Header.Get(trafficHeader), b.traffic)
	}
	return exposed
}

// portError is the JSON body E2B's edge answers a refused request for a
// sandbox's port with; the SDKs' tests read these fields.
type portError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

func writePortError(w http.ResponseWriter, e portError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(e) // the client may be gone
}

// The refusals' messages, E2B's words where E2B has the case.
const (
	msgNotFound     = "The sandbox was not found"
	msgPortClosed   = "The sandbox is running but port is not open"
	msgTokenMissing = "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing"
	msgTokenInvalid = "Sandbox is secured with traffic access token. Provided token in header 'e2b-traffic-access-token' is invalid"
)

// servePort proxies a data-plane request for port (never envd's) of
// sandbox id to that port inside the sandbox: HTTP/1.1, streamed both
// ways, and upgrades (WebSocket) for their whole life. Who may: the
// sandbox's policy must expose the port (ports.expose); a port whose
// access is token needs the sandbox's traffic access token, and only
// that token (the envd access token is not taken here: it commands the
// whole sandbox, and a client of a port should not need to hold it).
// Refusals are E2B's edge's answers; every request, refused or not, is
// an audit record and an event in the sandbox's log.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	rec := Record{Sandbox: clip(id), Op: "port", Port: port, Client: r.RemoteAddr}
	refuse := func(outcome string, e portError) {
		rec.Outcome = outcome
		rec.Detail = fmt.Sprintf("port %d: %s", port, e.Message)
		s.audit.record(rec)
		e.SandboxID = id
		writePortError(w, e)
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	var lv *live
	if b != nil {
		lv = s.wake(r, b, func() bool { return b.portOpen(r, port) })
	}
	if lv == nil {
		// Unknown, dead and paused answer alike: E2B's edge cannot tell
		// them apart either, and no tenant learns of another's.
		refuse("not_found", portError{Message: msgNotFound, Code: http.StatusBadGateway})
		return
	}
	rec.Tenant, rec.Sandbox = b.tenant, b.id
	access, exposed := b.portAccess(port)
	if access == policy.AccessToken || !exposed && b.private {
		// A private sandbox asks for its token before it tells whether
		// a port is exposed.
		switch t := r.Header.Get(trafficHeader); {
		case t == "":
			refuse("denied", portError{Message: msgTokenMissing, Code: http.StatusForbidden})
			return
		case !portproxy.TokenOK(t, b.traffic):
			refuse("denied", portError{Message: msgTokenInvalid, Code: http.StatusForbidden})
			return
		}
	}
	if !exposed {
		refuse("not_exposed", portError{Message: fmt.Sprintf("Port %d is not exposed by the sandbox's policy", port), Port: port, Code: http.StatusForbidden})
		return
	}
	cn, ok := lv.sb.(sandbox.Connector)
	if !ok {
		refuse("unsupported", portError{Message: msgPortClosed, Port: port, Code: http.StatusBadGateway})
		return
	}
	rl := &portproxy.Relay{
		Sandbox: cn, Port: port, Limits: &b.template.doc.Ports, Counters: &b.ports,
		// The server sees the host its client asked for, as in E2B, or
		// the sandbox's maskRequestHost.
		Host:  func(h string) string { return b.requestHost(h, port) },
		Strip: routingHeaders,
		Refuse: func(w http.ResponseWriter, f portproxy.Refusal) {
			// E2B's edge's words where it has the case.
			e := portError{SandboxID: id, Message: f.Message, Port: port, Code: f.Status}
			switch f.Outcome {
			case portproxy.Closed:
				e.Message = msgPortClosed
			case portproxy.Lost:
				e = portError{SandboxID: id, Message: msgNotFound, Code: http.StatusBadGateway}
			case portproxy.Limited, portproxy.Failed:
				e.Message = capitalize(f.Message)
			}
			writePortError(w, e)
		},
		// What the proxy logs itself (a copy that failed mid-body): the
		// server's log, not the log package's.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		Done: func(res portproxy.Result) {
			rec.Outcome, rec.Detail = res.Outcome, res.Detail
			rec.BytesIn, rec.BytesOut, rec.DurationMS = res.In, res.Out, res.Duration.Milliseconds()
			s.audit.record(rec)
		},
	}
	rl.ServeHTTP(w, r)
}

// capitalize starts msg with a capital, as E2B's edge's messages do.
func capitalize(msg string) string {
	if msg == "" || msg[0] < 'a' || msg[0] > 'z' {
		return msg
	}
	return string(msg[0]-'a'+'A') + msg[1:]
}
