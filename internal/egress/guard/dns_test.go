package guard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsAnswer is what the test DNS server sends for one question: A, AAAA and
// CNAME records, or an error code.
type dnsAnswer struct {
	cname []string // chain of CNAME targets, in order
	addrs []string // A / AAAA records for the last name of the chain
	rcode dnsmessage.RCode
}

// dnsServer is a tiny authoritative DNS server over UDP on 127.0.0.1. For
// each question it calls answer with the question and how many times that
// name and type have been asked (1 for the first).
type dnsServer struct {
	pc     net.PacketConn
	answer func(name string, qtype dnsmessage.Type, n int) dnsAnswer

	mu sync.Mutex
	// asked counts questions by "name type". Guarded by mu.
	asked map[string]int
}

func startDNS(t *testing.T, answer func(name string, qtype dnsmessage.Type, n int) dnsAnswer) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	s := &dnsServer{pc: pc, answer: answer, asked: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve(t)
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return s
}

func (s *dnsServer) serve(t *testing.T) {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		resp, err := s.respond(buf[:n])
		if err != nil {
			t.Logf("dns server: %v", err)
			continue
		}
		if _, err := s.pc.WriteTo(resp, from); err != nil {
			t.Logf("dns server: write: %v", err)
		}
	}
}

func (s *dnsServer) respond(req []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	s.mu.Lock()
	key := name + " " + q.Type.String()
	s.asked[key]++
	count := s.asked[key]
	s.mu.Unlock()
	ans := s.answer(name, q.Type, count)

	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: ans.rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	owner := q.Name
	for _, c := range ans.cname {
		target := dnsmessage.MustNewName(c + ".")
		rh := dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: 1}
		if err := b.CNAMEResource(rh, dnsmessage.CNAMEResource{CNAME: target}); err != nil {
			return nil, err
		}
		owner = target
	}
	for _, a := range ans.addrs {
		ip := netip.MustParseAddr(a)
		rh := dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: 1}
		switch {
		case q.Type == dnsmessage.TypeA && ip.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: ip.As4()})
		case q.Type == dnsmessage.TypeAAAA && ip.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: ip.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// count returns how often name was asked for with qtype.
func (s *dnsServer) count(name string, qtype dnsmessage.Type) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[name+" "+qtype.String()]
}

// resolver returns a pure-Go resolver that asks only this server.
func (s *dnsServer) resolver() *net.Resolver {
	addr := s.pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
}

// zone is a static map from name to answer, for tests that need no
// per-query behaviour. Unknown names get NXDOMAIN.
func zone(m map[string]dnsAnswer) func(string, dnsmessage.Type, int) dnsAnswer {
	return func(name string, _ dnsmessage.Type, _ int) dnsAnswer {
		if a, ok := m[name]; ok {
			return a
		}
		return dnsAnswer{rcode: dnsmessage.RCodeNameError}
	}
}

// TestDNSServer checks the test server itself through the Go resolver.
func TestDNSServer(t *testing.T) {
	s := startDNS(t, zone(map[string]dnsAnswer{
		"two.test":   {addrs: []string{"127.0.0.2", "127.0.0.3", "::1"}},
		"chain.test": {cname: []string{"mid.test", "end.test"}, addrs: []string{"127.0.0.4"}},
	}))
	r := s.resolver()
	got, err := r.LookupNetIP(context.Background(), "ip", "two.test")
	if err != nil || len(got) != 3 {
		t.Fatalf("LookupNetIP(two.test) = %v, %v; want 3 addresses", got, err)
	}
	got, err = r.LookupNetIP(context.Background(), "ip4", "chain.test")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("127.0.0.4") {
		t.Fatalf("LookupNetIP(chain.test) = %v, %v; want 127.0.0.4", got, err)
	}
	_, err = r.LookupNetIP(context.Background(), "ip", "missing.test")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("LookupNetIP(missing.test) err = %v, want not found", err)
	}
}
