package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
)

// openPolicyStore opens the run store for the policy commands. It needs no
// redaction of the env's model keys: what these commands write is a
// policy document (which the store never redacts: its hash names it), a
// file name and the local user's name.
func openPolicyStore(env *Env) (store.Store, error) {
	if env.Home == "" {
		return nil, errors.New("no airlock home directory")
	}
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		return nil, err
	}
	st, err := host.OpenStore(env.Ctx, env.Home, env.Store, store.NoRedaction)
	return st, hostError(err)
}

// policyNameError is the usage error of a malformed policy name.
func policyNameError(name string) error {
	return usageError{Err: fmt.Errorf("policy name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
		name, store.MaxPolicyNameLen)}
}

// splitPolicyRef reads NAME, NAME@vN or NAME@HASHPREFIX; a malformed one is
// a usage error.
func splitPolicyRef(arg string) (name, ref string, err error) {
	name, ref, at := strings.Cut(arg, "@")
	if store.ValidatePolicyName(name) != nil {
		return "", "", policyNameError(name)
	}
	if _, err := store.ParsePolicyRef(ref); err != nil || (at && ref == "") {
		return "", "", usageError{Err: fmt.Errorf("%q: after the @ give vN or at least 8 hex digits of the version's hash", arg)}
	}
	return name, ref, nil
}

// isPolicyRef reports whether arg reads as NAME[@vN|@HASHPREFIX].
func isPolicyRef(arg string) bool {
	_, _, err := splitPolicyRef(arg)
	return err == nil
}

// getPolicy reads a stored version; a name or version that does not
// exist is a usage error saying which.
func getPolicy(ctx context.Context, st store.Store, tenant, arg string) (store.PolicyVersion, error) {
	name, ref, err := splitPolicyRef(arg)
	if err != nil {
		return store.PolicyVersion{}, err
	}
	v, err := st.GetPolicy(ctx, tenant, name, ref)
	switch {
	case errors.Is(err, store.ErrNotFound) && ref == "":
		return v, usageError{Err: fmt.Errorf("no stored policy %q (airlock policy ls lists them)", name)}
	case errors.Is(err, store.ErrNotFound):
		return v, usageError{Err: fmt.Errorf("policy %s has no version %s (airlock policy history %s lists them)", name, ref, name)}
	case errors.Is(err, store.ErrInvalid):
		return v, usageError{Err: err}
	}
	return v, err
}

// policyNameOf makes a policy name of a file's base name without its
// extension: lower case, each character a name cannot hold turned into
// '-', leading ones that are not a letter or digit dropped, at most
// store.MaxPolicyNameLen bytes. It is "" when nothing is left.
func policyNameOf(path string) string {
	base := filepath.Base(path)
	base = strings.TrimSuffix(base, filepath.Ext(base))
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '.' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.TrimLeft(b.String(), "._-")
	name = name[:min(len(name), store.MaxPolicyNameLen)]
	if store.ValidatePolicyName(name) != nil {
		return ""
	}
	return name
}

// runPolicy is the document a new run (or fork) is held to, from
// --policy.
type runPolicy struct {
	doc    []byte
	parsed *policy.Document
	source string
	// name is the stored policy a file's document is recorded under as a
	// version; "" records none.
	name string
	// ref is set instead of doc when --policy names a stored version
	// (NAME[@vN|@HASHPREFIX]): loadStored reads it, and sets version to
	// the version it is ("NAME@vN").
	ref     string
	version string
}

// readRunPolicy reads --policy ARG: a policy file, as it always was, or,
// when there is no such file, the name of a stored policy, which
// loadStored then reads. A file's document is to be recorded under
// nameFlag, else its base name made a valid name (or, when none can be
// made, not recorded). Errors are usage errors, but for a store that
// fails.
func readRunPolicy(arg, nameFlag string) (runPolicy, error) {
	if nameFlag != "" && store.ValidatePolicyName(nameFlag) != nil {
		return runPolicy{}, fmt.Errorf("--policy-name: %w", policyNameError(nameFlag))
	}
	b, err := os.ReadFile(arg)
	if errors.Is(err, fs.ErrNotExist) && isPolicyRef(arg) {
		if nameFlag != "" {
			return runPolicy{}, fmt.Errorf("--policy-name names the stored policy of a policy file; %s is no file but a stored policy", arg)
		}
		return runPolicy{ref: arg}, nil
	}
	if err == nil {
		var doc *policy.Document
		if doc, err = policy.Parse(b); err == nil {
			name := nameFlag
			if name == "" {
				name = policyNameOf(arg)
			}
			return runPolicy{doc: b, parsed: doc, source: arg, name: name}, nil
		}
	}
	return runPolicy{}, fmt.Errorf("--policy: %w", err)
}

// loadStored reads the stored version p.ref names, of tenant's policies.
// The version is already stored: the run records no new one.
func (p runPolicy) loadStored(ctx context.Context, st store.Store, tenant string) (runPolicy, error) {
	v, err := getPolicy(ctx, st, tenant, p.ref)
	var usage usageError
	switch {
	case errors.As(err, &usage):
		return p, fmt.Errorf("--policy %s: no such file, and %w", p.ref, err)
	case err != nil:
		return p, reportedError{Err: fmt.Errorf("--policy %s: %w", p.ref, err), Code: 125}
	}
	doc, err := policy.Parse(v.Document)
	if err != nil {
		return p, fmt.Errorf("--policy %s: stored version v%d does not load: %w", p.ref, v.Version, err)
	}
	return runPolicy{doc: v.Document, parsed: doc, source: fmt.Sprintf("policy %s v%d", v.Name, v.Version), version: fmt.Sprintf("%s@v%d", v.Name, v.Version)}, nil
}

// loadStoredFrom is loadStored on a store of its own, for airlock run,
// which reads its policy before it opens the host.
func (p runPolicy) loadStoredFrom(env *Env, tenant string) (runPolicy, error) {
	st, err := openPolicyStore(env)
	if err != nil {
		return p, reportedError{Err: fmt.Errorf("--policy %s: %w", p.ref, err), Code: 125}
	}
	defer st.Close()
	return p.loadStored(env.Ctx, st, tenant)
}

// PolicyPutCmd is `airlock policy put NAME FILE`.
type PolicyPutCmd struct {
	Name string `arg:"" help:"Policy name: 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit." placeholder:"NAME"`
	File string `arg:"" help:"Policy document (YAML)." placeholder:"FILE"`
}

// Run validates the document like policy check, stores it, and prints
// "NAME vN HASH (new)" or "(unchanged)".
func (c *PolicyPutCmd) Run(env *Env) error {
	if store.ValidatePolicyName(c.Name) != nil {
		return policyNameError(c.Name)
	}
	if _, err := loadPolicy(env, c.File); err != nil {
		return err
	}
	// Read again and check what is stored, should the file have changed
	// since it was validated.
	b, err := os.ReadFile(c.File)
	if err == nil {
		_, err = policy.Parse(b)
	}
	if err != nil {
		return usageError{Err: fmt.Errorf("%s: %w", c.File, err)}
	}
	be, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer be.close()
	v, created, err := be.putPolicy(env.Ctx, c.Name, c.File, b)
	if err != nil {
		return err
	}
	what := "new"
	if !created {
		what = "unchanged"
	}
	fmt.Fprintf(env.Stdout, "%s v%d %s (%s)\n", v.Name, v.Version, shownHash(v), what)
	return nil
}

// shownHash is the hash a stored policy version is shown by: its policy
// hash (the canonical hash, as policy check shows it), or, for a version
// whose document no longer parses, the hash of its bytes.
func shownHash(v store.PolicyVersion) string {
	if v.PolicyHash != "" {
		return v.PolicyHash
	}
	return v.Hash
}

// fillPolicyHashes gives the versions st stored without a policy hash
// (before the stores kept one) the hash of their documents.
func fillPolicyHashes(ctx context.Context, st store.Store, tenant string, vs []store.PolicyVersion) {
	store.FillPolicyHashes(vs, func(v store.PolicyVersion) ([]byte, error) {
		full, err := st.GetPolicy(ctx, tenant, v.Name, fmt.Sprintf("v%d", v.Version))
		return full.Document, err
	}, policy.HashOf)
}

// toPolicyJSON is the stable JSON form of a stored policy version: the
// API's, without the document.
func toPolicyJSON(v store.PolicyVersion) api.PolicyVersion {
	return api.PolicyVersion{Name: v.Name, Version: v.Version, Hash: shownHash(v), DocumentHash: v.Hash, Created: v.CreatedAt.UTC(), Source: v.Source, By: v.By}
}

// writePolicies prints versions as JSON lines or as a table; name adds a
// NAME column.
func writePolicies(w io.Writer, vs []store.PolicyVersion, asJSON, name bool) error {
	if asJSON {
		out := make([]api.PolicyVersion, 0, len(vs))
		for _, v := range vs {
			out = append(out, toPolicyJSON(v))
		}
		return sandboxcli.WriteJSON(w, out...)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if name {
		fmt.Fprint(tw, "NAME\t")
	}
	fmt.Fprintln(tw, "VERSION\tHASH\tCREATED\tSOURCE\tBY")
	for _, v := range vs {
		if name {
			fmt.Fprintf(tw, "%s\t", v.Name)
		}
		fmt.Fprintf(tw, "v%d\t%s\t%s\t%s\t%s\n", v.Version, shortHash(shownHash(v)), v.CreatedAt.Local().Format("2006-01-02 15:04:05"),
			orDash(clip(oneLine(v.Source), 50)), orDash(v.By))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// PolicyHistoryCmd is `airlock policy history NAME`.
type PolicyHistoryCmd struct {
	Name string `arg:"" help:"Policy name." placeholder:"NAME"`
	JSON bool   `name:"json" help:"One JSON object per version: name, version, hash, created, source, by."`
}

// Run lists the versions, newest first.
func (c *PolicyHistoryCmd) Run(env *Env) error {
	if store.ValidatePolicyName(c.Name) != nil {
		return policyNameError(c.Name)
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	vs, err := b.policyVersions(env.Ctx, c.Name)
	if errors.Is(err, store.ErrNotFound) {
		return usageError{Err: fmt.Errorf("no stored policy %q (airlock policy ls lists them)", c.Name)}
	}
	if err != nil {
		return err
	}
	return writePolicies(env.Stdout, vs, c.JSON, false)
}

// PolicyShowCmd is `airlock policy show NAME[@vN|@HASHPREFIX]`.
type PolicyShowCmd struct {
	Ref string `arg:"" name:"policy" help:"NAME (the latest version), NAME@vN, or NAME@HASHPREFIX (8 or more hex digits)." placeholder:"NAME[@VERSION]"`
}

// Run prints the stored document byte for byte.
func (c *PolicyShowCmd) Run(env *Env) error {
	if _, _, err := splitPolicyRef(c.Ref); err != nil {
		return err
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	v, err := b.policy(env.Ctx, c.Ref)
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(v.Document)
	return err
}

// PolicyLsCmd is `airlock policy ls`.
type PolicyLsCmd struct {
	JSON bool `name:"json" help:"One JSON object per policy, at its latest version: name, version, hash, created, source, by."`
}

// Run lists the policies by name.
func (c *PolicyLsCmd) Run(env *Env) error {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	vs, err := b.policies(env.Ctx)
	if err != nil {
		return err
	}
	return writePolicies(env.Stdout, vs, c.JSON, true)
}
