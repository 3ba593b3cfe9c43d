package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/secret"
)

// The secrets endpoints keep a tenant's secrets in the host's encrypted
// store, with the caller's tenant as the store's tenant: another tenant's
// secret is not found, like one that does not exist. A value goes one way,
// from the request body into the store (and the host's redactor); no
// answer, error message or log line ever holds it, and a malformed body is
// answered without quoting any of it.

// maxSecretBody bounds the body of PUT /v1/secrets/{name}: a value of
// secret.MaxValueSize bytes, the JSON escapes of some of its characters
// (a PEM key's newlines), and its host bindings.
const maxSecretBody = secret.MaxValueSize + 16<<10

// maxSecretHosts bounds the host patterns one secret is bound to.
const maxSecretHosts = 64

var (
	errNoSecret      = publicf(api.CodeNotFound, "no such secret")
	errNoSecretStore = publicf(api.CodeUnavailable, "this server keeps no secrets (it was started without a secret store)")
	errSecretBody    = badRequest(`malformed JSON body: want {"value": "…", "hosts": ["…"]} and nothing else`)
)

// secretText is a validation message of internal/secret (a name or a host
// pattern, never a value) fit for the client.
func secretText(err error) string {
	return clipText(strings.TrimPrefix(err.Error(), "secret: "), maxMessage)
}

// SecretOf is a secret's description as the API shows it.
func SecretOf(i secret.Info) api.Secret {
	hosts := slices.Clone(i.Hosts)
	if hosts == nil {
		hosts = []string{}
	}
	return api.Secret{Name: i.Name, Created: i.Created.UTC(), Updated: i.Updated.UTC(), Hosts: hosts}
}

// decodeSecret reads the body of PUT /v1/secrets/{name}. Its errors never
// quote the body: a JSON error could quote a piece of the value.
func decodeSecret(rd io.Reader) (api.SecretRequest, error) {
	var q api.SecretRequest
	b, err := io.ReadAll(rd)
	defer clear(b)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return q, err
	case err != nil:
		return q, badRequest("the request body could not be read")
	case len(bytes.TrimSpace(b)) == 0:
		return q, badRequest("the request needs a JSON body")
	case !utf8.Valid(b):
		return q, badRequest("value: want UTF-8 text")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return api.SecretRequest{}, errSecretBody
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return api.SecretRequest{}, errSecretBody
	}
	return q, nil
}

// checkSecret validates a secret's value and normalizes its hosts. Its
// messages never quote the value.
func checkSecret(q api.SecretRequest) ([]string, error) {
	switch {
	case q.Value == "":
		return nil, badRequest("value: empty")
	case len(q.Value) > secret.MaxValueSize:
		return nil, publicf(api.CodeTooLarge, "value: over %d bytes", secret.MaxValueSize)
	case strings.ContainsRune(q.Value, utf8.RuneError):
		// The decoder puts U+FFFD in place of a lone surrogate escape:
		// storing it would store another value than the one sent.
		return nil, badRequest("value: want UTF-8 text (no lone surrogate escapes)")
	case len(q.Hosts) > maxSecretHosts:
		return nil, badRequest("hosts: %d patterns, at most %d", len(q.Hosts), maxSecretHosts)
	}
	hosts, err := secret.NormalizeHosts(q.Hosts)
	if err != nil {
		return nil, badRequest("hosts: %s", secretText(err))
	}
	return hosts, nil
}

// findSecret returns tenant's secret name's description, if it has one.
func (s *Server) findSecret(ctx context.Context, tenant, name string) (secret.Info, bool, error) {
	infos, err := s.o.Secrets.List(ctx, tenant)
	if err != nil {
		return secret.Info{}, false, err
	}
	i := slices.IndexFunc(infos, func(i secret.Info) bool { return i.Name == name })
	if i < 0 {
		return secret.Info{}, false, nil
	}
	return infos[i], true, nil
}

// putSecret stores the body's value as the tenant's secret {name},
// replacing any earlier value, and answers its description: 201 for a new
// secret, 200 for a replaced one.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.o.Secrets == nil {
		return errNoSecretStore
	}
	name := r.PathValue("name")
	if err := secret.ValidName(name); err != nil {
		return badRequest("%s", secretText(err))
	}
	q, err := decodeSecret(http.MaxBytesReader(w, r.Body, maxSecretBody))
	if err != nil {
		return err
	}
	hosts, err := checkSecret(q)
	if err != nil {
		return err
	}
	ctx := r.Context()
	_, existed, err := s.findSecret(ctx, c.p.Tenant, name)
	if err != nil {
		return err
	}
	b := []byte(q.Value)
	v := secret.NewValue(b)
	clear(b)
	if err := s.o.Secrets.Set(ctx, c.p.Tenant, name, v, hosts); err != nil {
		return err
	}
	if s.o.Redactor != nil {
		s.o.Redactor.Add(v)
	}
	info, ok, err := s.findSecret(ctx, c.p.Tenant, name)
	switch {
	case err != nil:
		return err
	case !ok:
		// Deleted by another request meanwhile.
		return publicf(api.CodeConflict, "the secret changed meanwhile; try again")
	}
	c.log.Info("secret set", "secret", name, "hosts", len(hosts), "replaced", existed)
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, SecretOf(info))
	return nil
}

// listSecrets lists the tenant's secrets by name: names, hosts and times.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.o.Secrets == nil {
		return errNoSecretStore
	}
	infos, err := s.o.Secrets.List(r.Context(), c.p.Tenant)
	if err != nil {
		return err
	}
	out := api.SecretList{Tenant: c.p.Tenant, Secrets: make([]api.Secret, 0, len(infos))}
	for _, i := range infos {
		out.Secrets = append(out.Secrets, SecretOf(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSecret deletes the tenant's secret {name}; any name the tenant has
// no secret of, a malformed one too, is not found.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.o.Secrets == nil {
		return errNoSecretStore
	}
	name := r.PathValue("name")
	if secret.ValidName(name) != nil {
		return errNoSecret
	}
	err := s.o.Secrets.Delete(r.Context(), c.p.Tenant, name)
	if errors.Is(err, secret.ErrNotFound) {
		return errNoSecret
	}
	if err != nil {
		return err
	}
	c.log.Info("secret deleted", "secret", name)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
