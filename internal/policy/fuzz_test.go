package policy

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airlockrun/airlock/internal/hostname"
)

// FuzzParse: no input panics, and a document Parse accepts validates again
// unchanged, survives a YAML round trip, has a canonical form that parses
// to the same canonical form and hash, and decides tool calls without
// panicking and with a valid action.
func FuzzParse(f *testing.F) {
	f.Add([]byte(issueExample))
	f.Add([]byte(fullExample))
	f.Add([]byte(decideExample))
	f.Add([]byte("network:\n  default: ask\n  allow:\n    - cidr: 10.0.0.0/8\n      ports: [8080]\n"))
	f.Add([]byte("network:\n  allow:\n    - host: \"*.Example.COM.\"\n      paths: [/v1/]\n      methods: [get]\n"))
	f.Add([]byte("network:\n  credentials:\n    - host: a.example\n      secret: s\n      query: key\n"))
	f.Add([]byte(llmExample))
	f.Add([]byte("llm: {models: [a, '*'], map: {b: 'x:y'}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse(data)
		if err != nil {
			return
		}
		first := cloneNetwork(doc.Network)
		if err := doc.Network.Validate(); err != nil {
			t.Fatalf("a parsed document does not validate again: %v", err)
		}
		if !equalNetwork(first, doc.Network) {
			t.Fatalf("Validate changed a parsed document:\n%+v\n%+v", first, doc.Network)
		}
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", out, err)
		}
		if !equalNetwork(doc.Network, again.Network) {
			t.Fatalf("round trip changed the document:\n%+v\n%+v", doc.Network, again.Network)
		}
		for _, m := range doc.LLM.Models {
			if up, name, _ := doc.LLM.Resolve("openai", m); !doc.LLM.Allows(up, name) && up == "openai" && name == m {
				t.Fatalf("llm.models lists %q but Allows refuses it", m)
			}
		}
		canon := doc.Canonical()
		fromCanon, err := Parse(canon)
		if err != nil {
			t.Fatalf("re-parse of the canonical form\n%s\nfailed: %v", canon, err)
		}
		if c2 := fromCanon.Canonical(); !bytes.Equal(c2, canon) || fromCanon.Hash() != doc.Hash() || again.Hash() != doc.Hash() {
			t.Fatalf("canonical form is not a fixed point:\n%s\n%s", canon, c2)
		}
		for _, req := range fuzzRequests {
			dec := doc.DecideTool(req)
			switch dec.Action {
			case Allow, Deny, Ask:
			default:
				t.Fatalf("DecideTool(%+v) = %+v: not a valid action", req, dec)
			}
			if dec.Rule == "" {
				t.Fatalf("DecideTool(%+v) = %+v: no rule", req, dec)
			}
			if !doc.ToolEnabled(req.Tool) && dec.Action != Deny {
				t.Fatalf("DecideTool(%+v) = %+v for a disabled tool", req, dec)
			}
		}
	})
}

// FuzzDecideTool: whatever the arguments, a decision under a policy whose
// rules read them is valid, names a rule, and is the same every time.
func FuzzDecideTool(f *testing.F) {
	f.Add("run_command", []byte(`{"command":"git push origin main","timeout_seconds":60}`), int64(3))
	f.Add("write_file", []byte(`{"path":"/workspace/src/../../etc/passwd","content":"x"}`), int64(1))
	f.Add("typed", []byte(`{"n":1e400,"f":-0.0,"ok":null,"list":[{"a":[]}],"obj":{"k":"1"}}`), int64(41))
	f.Add("who", []byte(`[1,2,3]`), int64(-1))
	f.Add("create_issue", []byte(`{"a":1}{"b":2}`), int64(0))
	f.Add("scan", []byte(`{"xa":1,"b":{"c":[1,2]}}`), int64(2))
	doc, err := Parse([]byte(decideExample + "  scan:\n    rules:\n      - when: args.exists(k, k.startsWith('x')) && args.map(k, k)[0] == 'xa'\n        action: allow\n"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tool string, raw []byte, step int64) {
		req := ToolRequest{Tool: tool, Args: raw, Run: RunInfo{Step: step}, Sandbox: "main"}
		first := doc.DecideTool(req)
		switch first.Action {
		case Allow, Deny, Ask:
		default:
			t.Fatalf("DecideTool(%+v) = %+v: not a valid action", req, first)
		}
		if first.Rule == "" || first.Reason == "" {
			t.Fatalf("DecideTool(%+v) = %+v: no rule or reason", req, first)
		}
		for i := 0; i < 3; i++ {
			if again := doc.DecideTool(req); !reflect.DeepEqual(again, first) {
				t.Fatalf("DecideTool(%+v) = %+v, then %+v", req, first, again)
			}
		}
	})
}

var fuzzRequests = []ToolRequest{
	{Tool: "run_command", Args: json.RawMessage(`{"command":"git push origin","timeout_seconds":60}`), Sandbox: "main", Run: RunInfo{Step: 3}},
	{Tool: "write_file", Args: json.RawMessage(`{"path":"/workspace/src/a.go","content":"x"}`), Sandbox: "main"},
	{Tool: "create_issue", Args: json.RawMessage(`{"title":"t","labels":["a",1,null,{"x":[]}]}`), External: true},
	{Tool: "finish", Args: json.RawMessage(`not json`)},
}

// cloneNetwork deep-copies n (Validate rewrites in place).
func cloneNetwork(n Network) Network {
	c := n
	c.Allow = nil
	for _, r := range n.Allow {
		r.Ports = append([]int(nil), r.Ports...)
		r.Methods = append([]string(nil), r.Methods...)
		r.Paths = append([]string(nil), r.Paths...)
		c.Allow = append(c.Allow, r)
	}
	c.Resolve = append([]Pin(nil), n.Resolve...)
	c.Credentials = append([]Credential(nil), n.Credentials...)
	return c
}

// equalNetwork compares with nil and empty slices equal.
func equalNetwork(a, b Network) bool {
	a, b = cloneNetwork(a), cloneNetwork(b)
	return reflect.DeepEqual(a, b)
}

// FuzzDecide: whatever the rule and the request, an allow means the request
// host is the rule host or under its wildcard, on a default port.
func FuzzDecide(f *testing.F) {
	f.Add("*.example.com", "a.example.com", uint16(443), "GET", "/")
	f.Add("api.github.com", "API.github.com.", uint16(80), "", "")
	f.Add("10.0.0.1", "0xa000001", uint16(443), "", "")
	f.Add("*.example.com", "example.com", uint16(443), "", "")
	f.Fuzz(func(t *testing.T, ruleHost, reqHost string, port uint16, method, path string) {
		n := Network{Allow: []Rule{{Host: ruleHost}}}
		if err := n.Validate(); err != nil {
			return
		}
		h, err := hostname.Normalize(reqHost)
		if err != nil {
			return
		}
		d := n.Decide(Request{Host: h, Port: int(port), Method: method, Path: path})
		if d.Verdict != Allow {
			return
		}
		pattern := n.Allow[0].Host
		if port != 80 && port != 443 {
			t.Fatalf("rule %q allowed port %d", pattern, port)
		}
		if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
			if !strings.HasSuffix(h, "."+suffix) || h == suffix {
				t.Fatalf("rule %q allowed %q", pattern, h)
			}
			if _, err := netip.ParseAddr(h); err == nil {
				t.Fatalf("wildcard %q allowed the address %q", pattern, h)
			}
			return
		}
		if h != pattern {
			t.Fatalf("rule %q allowed %q", pattern, h)
		}
	})
}
