package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// Bounds of request fields.
const (
	maxListItems = engine.MaxChecks
	maxItemLen   = 4096
)

// models are the model providers a tenant may ask for. openai-compatible
// is not: it needs a base URL, and a tenant-chosen base URL would receive
// the host's provider key. replay is a host-side debugging tool.
var models = []string{"anthropic", "openai", "openai-responses"}

// checkModel validates a model spec a client gave.
func checkModel(m string) error {
	kind, name, ok := strings.Cut(m, ":")
	if !ok || name == "" || len(m) > store.MaxModelLen || !printableText(m) {
		return badRequest("model %q: want PROVIDER:MODEL with PROVIDER one of %s", clipText(m, 80), strings.Join(models, ", "))
	}
	if !slices.Contains(models, kind) {
		return badRequest("model provider %q: want one of %s, or a script", clipText(kind, 40), strings.Join(models, ", "))
	}
	return nil
}

func printableText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// checkList validates a list of checks or globs.
func checkList(field string, list []string) error {
	if len(list) > maxListItems {
		return badRequest("%s: %d entries, at most %d", field, len(list), maxListItems)
	}
	for i, v := range list {
		if strings.TrimSpace(v) == "" || len(v) > maxItemLen || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return badRequest("%s[%d]: want non-empty UTF-8 text of at most %d bytes", field, i, maxItemLen)
		}
	}
	return nil
}

// checkMetadata validates a run's metadata as the engine will.
func checkMetadata(md map[string]string) error {
	if err := event.CheckMetadata(md); err != nil {
		return badRequest("%s", strings.TrimPrefix(err.Error(), "event: "))
	}
	return nil
}

// validateCreate checks what can be checked of a create request without
// the store.
func validateCreate(q *api.CreateRunRequest) error {
	switch {
	case strings.TrimSpace(q.Task) == "":
		return badRequest("task: empty")
	case len(q.Task) > store.MaxTaskLen || !utf8.ValidString(q.Task):
		return badRequest("task: want UTF-8 text of at most %d bytes", store.MaxTaskLen)
	}
	if err := checkChoices(q.Model, q.Script, q.Policy, q.PolicyDocument, q.MaxSteps, true); err != nil {
		return err
	}
	if q.Template != "" {
		if q.Policy != "" || q.PolicyDocument != "" {
			return badRequest("give template or a policy, not both: the template names its policy")
		}
		if _, _, err := splitTemplateRef(q.Template); err != nil {
			return err
		}
	}
	if ws := q.Workspace; ws != nil {
		switch {
		case (ws.Git == "") == (ws.Upload == ""):
			return badRequest("workspace: give exactly one of upload (the id of an uploaded tarball) and git (a repository URL)")
		case ws.Git != "":
			if err := (engine.GitSource{URL: ws.Git, Ref: ws.Ref}).Validate(); err != nil {
				return badRequest("workspace: %s", err.Error())
			}
		case ws.Ref != "":
			return badRequest("workspace.ref: goes with git, not with an upload")
		case !validUploadID(ws.Upload):
			return errNoUpload
		}
	}
	if v := q.Verify; v != nil {
		for field, list := range map[string][]string{"verify.commands": v.Commands, "verify.changed": v.Changed, "verify.only_changed": v.OnlyChanged} {
			if err := checkList(field, list); err != nil {
				return err
			}
		}
		for i, p := range v.Changed {
			if rel, ok := policy.WorkspacePath(p); !ok || rel == "." {
				return badRequest("verify.changed[%d]: %q is not a path inside /workspace", i, clipText(p, 200))
			}
		}
		if err := checkGlobs("verify.only_changed", v.OnlyChanged); err != nil {
			return err
		}
	}
	if err := checkList("artifacts", q.Artifacts); err != nil {
		return err
	}
	if err := checkGlobs("artifacts", q.Artifacts); err != nil {
		return err
	}
	return checkMetadata(q.Metadata)
}

// checkGlobs checks workspace globs as a policy document's are checked
// (policy.WorkspaceGlob): one outside the workspace could never match.
func checkGlobs(field string, globs []string) error {
	for i, g := range globs {
		if _, err := policy.WorkspaceGlob(g); err != nil {
			return badRequest("%s[%d]: %s", field, i, clientText(err))
		}
	}
	return nil
}

// validateFork checks what can be checked of a fork request without the
// store.
func validateFork(q *api.ForkRequest) error {
	switch {
	case q.AtStep == nil:
		return badRequest("at_step: required (0 forks from the start)")
	case *q.AtStep < 0 || *q.AtStep > 100_000:
		return badRequest("at_step %d: want 0 or more", *q.AtStep)
	}
	return checkChoices(q.Model, q.Script, q.Policy, q.PolicyDocument, q.MaxSteps, false)
}

// checkChoices checks what a run's create and fork requests share: the
// model or script (one of them when needModel), the stored policy or an
// inline document, and the step budget.
func checkChoices(model, script, pol, polDoc string, maxSteps int, needModel bool) error {
	switch {
	case script != "" && model != "":
		return badRequest("give model or script, not both")
	case needModel && script == "" && model == "":
		return badRequest("give model PROVIDER:MODEL or a script")
	case pol != "" && polDoc != "":
		return badRequest("give policy (a stored policy's name) or policy_document, not both")
	case maxSteps < 0 || maxSteps > 10_000:
		return badRequest("max_steps %d: want 1 to 10000", maxSteps)
	}
	if model != "" {
		if err := checkModel(model); err != nil {
			return err
		}
	}
	// A script is parsed once, by the engine, which refuses a bad one
	// as invalid (a 400 saying why).
	if pol != "" {
		if _, _, err := splitPolicyRef(pol); err != nil {
			return err
		}
	}
	return nil
}

// splitPolicyRef reads NAME, NAME@vN or NAME@HASHPREFIX.
func splitPolicyRef(arg string) (name, ref string, err error) {
	name, ref, at := strings.Cut(arg, "@")
	if store.ValidatePolicyName(name) != nil {
		return "", "", badRequest("policy name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", clipText(name, 80), store.MaxPolicyNameLen)
	}
	if _, err := store.ParsePolicyRef(ref); err != nil || (at && ref == "") {
		return "", "", badRequest("policy %q: after the @ give vN or at least 8 hex digits of the version's hash", clipText(arg, 100))
	}
	return name, ref, nil
}

// RunPolicy is the policy a new run is held to, resolved.
type RunPolicy struct {
	// Doc is the document's bytes as given (nil: the built-in default),
	// Parsed the document.
	Doc    []byte
	Parsed *policy.Document
	// Source names where it came from; Version the stored version it is,
	// "NAME@vN".
	Source  string
	Version string
	// Template, when the run starts from a stored template, is what of
	// it NewRun writes into the run.
	Template *RunTemplate
}

// resolvePolicy reads the policy a request names (stored, of the caller's
// tenant) or carries (inline), checks it, and returns it; neither gives
// the built-in default (no document).
func (s *Server) resolvePolicy(ctx context.Context, view *store.TenantStore, ref, inline string) (RunPolicy, error) {
	switch {
	case inline != "":
		doc, err := s.checkPolicy([]byte(inline))
		if err != nil {
			return RunPolicy{}, err
		}
		return RunPolicy{Doc: []byte(inline), Parsed: doc, Source: "api (inline)"}, nil
	case ref != "":
		name, r, err := splitPolicyRef(ref)
		if err != nil {
			return RunPolicy{}, err
		}
		v, err := view.GetPolicy(ctx, name, r)
		if errors.Is(err, store.ErrNotFound) {
			return RunPolicy{}, errNoPolicy
		}
		if errors.Is(err, store.ErrInvalid) {
			return RunPolicy{}, badRequest("policy %s: %s", clipText(ref, 100), clientText(err))
		}
		if err != nil {
			return RunPolicy{}, err
		}
		// Stored through this API (checked then) or by the host's CLI:
		// checked again, the rules may have changed since.
		doc, err := s.checkPolicy(v.Document)
		if err != nil {
			return RunPolicy{}, err
		}
		return RunPolicy{
			Doc: v.Document, Parsed: doc, Source: fmt.Sprintf("policy %s v%d", v.Name, v.Version),
			Version: fmt.Sprintf("%s@v%d", v.Name, v.Version),
		}, nil
	}
	return RunPolicy{Parsed: policy.Default()}, nil
}

// checkPolicy parses a policy document a tenant gave and refuses what
// names the host's resources (unless tenants are trusted).
func (s *Server) checkPolicy(b []byte) (*policy.Document, error) {
	if len(b) > store.MaxPolicyLen {
		return nil, publicf(api.CodeTooLarge, "the policy document is over %d bytes", store.MaxPolicyLen)
	}
	doc, err := policy.Parse(b)
	if err != nil {
		return nil, badRequest("policy: %s", clientText(err))
	}
	if s.cfg.TrustTenantPolicies {
		return doc, nil
	}
	if bad := doc.HostResources(); len(bad) > 0 {
		return nil, publicf(api.CodeForbidden, "policy: %s name host resources, which this server does not let tenants use", strings.Join(bad, ", "))
	}
	return doc, nil
}

// lower returns the smaller positive of a budget and a request's.
func lower(budget, asked int) int {
	if asked > 0 && (budget <= 0 || asked < budget) {
		return asked
	}
	return budget
}
