package egress

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/airlockrun/airlock/internal/hostname"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
)

// inject adds every credential the policy binds to host to out, fetching
// each value now so a rotated secret takes effect on the next request. It
// returns the secret names used, or a refusal reason:
// "credential_unavailable" when a value cannot be had or placed, and
// "credential_not_bound_to_host" when the secret's own host binding does not
// cover host (the store's binding narrows the policy, never widens it).
// A header the sandbox sent under the credential's name is replaced, never
// merged. Every injected value is registered with the redactor before the
// request leaves, so an echo is scrubbed.
func (p *Proxy) inject(ctx context.Context, out *http.Request, host string, port int) ([]string, string) {
	creds := p.pol.CredentialsFor(host, port)
	if len(creds) == 0 {
		return nil, ""
	}
	if p.secrets == nil {
		return nil, "credential_unavailable"
	}
	names := make([]string, 0, len(creds))
	for _, c := range creds {
		v, info, err := p.secrets.Get(ctx, p.id.Tenant, c.Secret)
		if err != nil {
			p.logErr("credential lookup", err, "secret", c.Secret, "host", host)
			return nil, "credential_unavailable"
		}
		if len(info.Hosts) > 0 && !boundTo(info.Hosts, host) {
			return nil, "credential_not_bound_to_host"
		}
		raw := string(v.Reveal())
		switch {
		case c.Header != "":
			tmpl := c.Value
			if tmpl == "" {
				tmpl = policy.SecretPlaceholder
			}
			val := strings.Replace(tmpl, policy.SecretPlaceholder, raw, 1)
			if !httpguts.ValidHeaderFieldName(c.Header) || !httpguts.ValidHeaderFieldValue(val) {
				return nil, "credential_unavailable"
			}
			p.remember(v)
			out.Header.Del(c.Header)
			out.Header[http.CanonicalHeaderKey(c.Header)] = []string{val}
		case c.Query != "":
			p.remember(v)
			p.remember(secret.NewValue([]byte(url.QueryEscape(raw))))
			out.URL.RawQuery = setQueryParam(out.URL.RawQuery, c.Query, raw)
			out.URL.ForceQuery = false
		case c.BasicUser != "":
			if !httpguts.ValidHeaderFieldValue(raw) {
				return nil, "credential_unavailable"
			}
			p.remember(v)
			p.remember(secret.NewValue([]byte(base64.StdEncoding.EncodeToString([]byte(c.BasicUser + ":" + raw)))))
			out.Header.Del("Authorization")
			out.SetBasicAuth(c.BasicUser, raw)
		default:
			return nil, "credential_unavailable"
		}
		names = append(names, c.Secret)
	}
	return names, ""
}

// remember registers v with the redactor once per Proxy (the redactor
// counts Adds, and rebuilding it on every request would be wasteful).
func (p *Proxy) remember(v secret.Value) {
	sum := sha256.Sum256(v.Reveal())
	key := string(sum[:])
	p.injectedMu.Lock()
	defer p.injectedMu.Unlock()
	if p.injected[key] {
		return
	}
	p.injected[key] = true
	p.redactor.Add(v)
}

// boundTo reports whether host, in hostname.Normalize form, matches one of
// a secret's host patterns: an exact name, or "*.suffix" for any depth below
// suffix, not suffix itself. The store keeps patterns normalized; they are
// normalized again here all the same, and one that does not normalize
// matches nothing.
func boundTo(patterns []string, host string) bool {
	for _, pat := range patterns {
		if n, err := hostname.Pattern(pat); err == nil && hostname.Match(n, host) {
			return true
		}
	}
	return false
}

// setQueryParam returns raw with every parameter called name removed and
// name=value appended. Parameters are compared decoded, and pairs joined by
// ';' (which some servers also split on) are removed whole when any part
// names the parameter, so the sandbox cannot smuggle in a second value. The
// other parameters keep their original encoding and order.
func setQueryParam(raw, name, value string) string {
	var kept []string
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" || namesParam(pair, name) {
			continue
		}
		kept = append(kept, pair)
	}
	kept = append(kept, url.QueryEscape(name)+"="+url.QueryEscape(value))
	return strings.Join(kept, "&")
}

func namesParam(pair, name string) bool {
	for part := range strings.SplitSeq(pair, ";") {
		k, _, _ := strings.Cut(part, "=")
		if k == name {
			return true
		}
		if dk, err := url.QueryUnescape(k); err != nil || dk == name {
			// An undecodable key could decode differently upstream.
			return true
		}
	}
	return false
}
