package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// A network ask holds one request of a sandbox at the egress proxy while a
// person decides on its destination. The run itself goes on (the call that
// made the request is still running) and stays running; the approval is
// listed with the others. The decision covers the destination for the rest
// of the run: approved, every later request to it is let through without
// asking; denied or expired (on timeout: deny), every later one is refused.
// The request is held for NetworkHold at most (and never beyond the
// approval timeout); an approval still open then expires, and the
// configured on-timeout action applies.

// DefaultNetworkHold is how long the proxy holds a request for a person's
// decision when Options.NetworkHold is zero.
const DefaultNetworkHold = 30 * time.Second

// netAsker serializes the asks of one destination: the second request to
// a destination waits for the first one's decision instead of asking again.
type netAsker struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (n *netAsker) lock(dest string) func() {
	n.mu.Lock()
	if n.locks == nil {
		n.locks = map[string]*sync.Mutex{}
	}
	m := n.locks[dest]
	if m == nil {
		m = new(sync.Mutex)
		n.locks[dest] = m
	}
	n.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// askNetwork decides a request of sandbox name to host:port that the
// network policy answers with ask. It returns when a person decided, the
// hold ended, or ctx ended (the sandbox gave up on the request).
//
// Preconditions: called by the egress proxy (Attachment.Ask), never by the
// loop: it reads the network approvals the driver shares, not st.
func (d *driver) askNetwork(ctx context.Context, name, host string, port int) (bool, error) {
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	defer d.netAsks.lock(dest)()
	_, onTimeout := d.approvalRules()

	d.mu.Lock()
	a := d.shared.net.latest(dest)
	d.mu.Unlock()
	if a.Decision != "" && a.Decision != "withdrawn" {
		return netAllowed(a, onTimeout), nil
	}
	id := a.req.ApprovalID
	if id == "" || a.Decision == "withdrawn" {
		req, err := d.netRequest(name, dest)
		if err != nil {
			return false, err
		}
		if _, err := d.record(ctx, req); err != nil {
			return false, err
		}
		id = req.ApprovalID
	}
	t := time.NewTicker(d.e.o.Poll)
	defer t.Stop()
	for {
		d.mu.Lock()
		a = d.shared.net.get(id)
		d.mu.Unlock()
		if a.Decision != "" && a.Decision != "withdrawn" {
			return netAllowed(a, onTimeout), nil
		}
		if a.Decision == "withdrawn" {
			return false, nil
		}
		if !d.e.o.Now().Before(a.req.Expires) {
			timeout, _ := d.approvalRules()
			_, err := d.record(ctx, event.ApprovalDecided{
				ApprovalID: id, Decision: "expired", By: "timeout",
				Reason: "no decision in " + min(timeout, d.netHold()).String() + "; on timeout: " + onTimeout,
			})
			if err != nil {
				return false, err
			}
			continue
		}
		select {
		case <-ctx.Done():
			// The sandbox gave up on the request, or the run is stopping:
			// the approval no longer holds anything.
			_, err := d.record(ctx, event.ApprovalDecided{
				ApprovalID: id, Decision: "withdrawn", By: "airlock",
				Reason: "the held request ended before a decision",
			})
			return false, err
		case <-t.C:
		}
		if err := d.catchUp(ctx); err != nil {
			return false, err
		}
	}
}

// netRequest is the event that asks for a decision on dest.
func (d *driver) netRequest(name, dest string) (event.ApprovalRequested, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return event.ApprovalRequested{}, err
	}
	timeout, _ := d.approvalRules()
	return event.ApprovalRequested{
		ApprovalID: approvalID(d.run.ID, "net-"+hex.EncodeToString(b[:])), Step: d.curStep(),
		Destination: dest, Sandbox: name, Action: "connect to " + dest,
		Reason:  "the network policy asks for destinations it does not list (default)",
		Expires: d.e.o.Now().Add(min(timeout, d.netHold())).UTC(),
	}, nil
}

func (d *driver) netHold() time.Duration {
	if d.e.o.NetworkHold > 0 {
		return d.e.o.NetworkHold
	}
	return DefaultNetworkHold
}

// netAllowed reports whether a decided network approval lets requests
// through.
func netAllowed(a approval, onTimeout string) bool {
	return a.Decision == "approved" || a.Decision == "expired" && onTimeout == "allow"
}

// withdrawNetwork closes the network approvals a previous drive left open:
// the requests they held ended with that process.
//
// Preconditions: called by the loop, before any sandbox exists.
func (d *driver) withdrawNetwork(ctx context.Context) error {
	open := d.st.net.open()
	var ps []event.Payload
	for _, a := range open {
		ps = append(ps, event.ApprovalDecided{
			ApprovalID: a.req.ApprovalID, Decision: "withdrawn", By: "airlock",
			Reason: "the held request ended with the host process",
		})
	}
	if len(ps) == 0 {
		return nil
	}
	return d.append(ctx, ps...)
}
