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
)

// policyNameError is the usage error of a malformed policy name.
func policyNameError(name string) error {
	return usageError{Err: fmt.Errorf("policy name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
		name, host.MaxPolicyNameLen)}
}

// splitPolicyRef reads NAME, NAME@vN or NAME@HASHPREFIX; a malformed one is
// a usage error.
func splitPolicyRef(arg string) (name, ref string, err error) {
	name, ref, at := strings.Cut(arg, "@")
	if host.ValidPolicyName(name) != nil {
		return "", "", policyNameError(name)
	}
	if err := host.ValidPolicyRef(ref); err != nil || (at && ref == "") {
		return "", "", usageError{Err: fmt.Errorf("%q: after the @ give vN or at least 8 hex digits of the version's hash", arg)}
	}
	return name, ref, nil
}

// isPolicyRef reports whether arg reads as NAME[@vN|@HASHPREFIX].
func isPolicyRef(arg string) bool {
	_, _, err := splitPolicyRef(arg)
	return err == nil
}

// policyNameOf makes a policy name of a file's base name without its
// extension: lower case, each character a name cannot hold turned into
// '-', leading ones that are not a letter or digit dropped, at most
// host.MaxPolicyNameLen bytes. It is "" when nothing is left.
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
	name = name[:min(len(name), host.MaxPolicyNameLen)]
	if host.ValidPolicyName(name) != nil {
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
	if nameFlag != "" && host.ValidPolicyName(nameFlag) != nil {
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

// loadStored reads the stored version p.ref names, of the backend's
// tenant's policies. The version is already stored: the run records no
// new one.
func (p runPolicy) loadStored(ctx context.Context, b backend) (runPolicy, error) {
	v, err := b.policy(ctx, p.ref)
	var usage usageError
	switch {
	case errors.As(err, &usage):
		return p, fmt.Errorf("--policy %s: no such file, and %w", p.ref, usage.Err)
	case err != nil:
		return p, reportedError{Err: fmt.Errorf("--policy %s: %w", p.ref, err), Code: 125}
	}
	doc, err := policy.Parse([]byte(v.Document))
	if err != nil {
		return p, fmt.Errorf("--policy %s: stored version v%d does not load: %w", p.ref, v.Version, err)
	}
	return runPolicy{doc: []byte(v.Document), parsed: doc, source: fmt.Sprintf("policy %s v%d", v.Name, v.Version), version: fmt.Sprintf("%s@v%d", v.Name, v.Version)}, nil
}

// PolicyPutCmd is `airlock policy put NAME FILE`.
type PolicyPutCmd struct {
	Name string `arg:"" help:"Policy name: 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit." placeholder:"NAME"`
	File string `arg:"" help:"Policy document (YAML)." placeholder:"FILE"`
}

// Run validates the document like policy check, stores it, and prints
// "NAME vN HASH (new)" or "(unchanged)".
func (c *PolicyPutCmd) Run(env *Env) error {
	if host.ValidPolicyName(c.Name) != nil {
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
	v, err := be.putPolicy(env.Ctx, c.Name, c.File, b)
	if err != nil {
		return err
	}
	what := "new"
	if v.New == nil || !*v.New {
		what = "unchanged"
	}
	fmt.Fprintf(env.Stdout, "%s v%d %s (%s)\n", v.Name, v.Version, v.Hash, what)
	return nil
}

// writePolicies prints versions as JSON lines or as a table; name adds a
// NAME column.
func writePolicies(w io.Writer, vs []api.PolicyVersion, asJSON, name bool) error {
	if asJSON {
		return sandboxcli.WriteJSON(w, vs...)
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
		fmt.Fprintf(tw, "v%d\t%s\t%s\t%s\t%s\n", v.Version, shortHash(v.Hash), v.Created.Local().Format("2006-01-02 15:04:05"),
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
	if host.ValidPolicyName(c.Name) != nil {
		return policyNameError(c.Name)
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	vs, err := b.policyVersions(env.Ctx, c.Name)
	var nf *host.PolicyNotFoundError
	if errors.As(err, &nf) {
		return usageError{Err: nf}
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
	_, err = io.WriteString(env.Stdout, v.Document)
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
