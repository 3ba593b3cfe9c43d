package kube_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// rbacManifest is airlock's least-privilege RBAC (deploy/kubernetes).
const rbacManifest = "../../../deploy/kubernetes/rbac.yaml"

// applyRBAC creates the manifest's objects with its two namespaces renamed
// to system and sandboxes.
func applyRBAC(t *testing.T, e *env, system, sandboxes string) {
	t.Helper()
	data, err := os.ReadFile(rbacManifest)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rename := func(ns string) string {
		switch ns {
		case "airlock-system":
			return system
		case "airlock-sandboxes":
			return sandboxes
		}
		t.Fatalf("the manifest names namespace %q", ns)
		return ""
	}
	n := 0
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		n++
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = rename(o.Namespace)
			for i := range o.Subjects {
				o.Subjects[i].Namespace = rename(o.Subjects[i].Namespace)
			}
			_, err = e.client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("the manifest has a %T, which the test does not apply", obj)
		}
		if err != nil {
			t.Fatalf("apply %s: %v", runtime.Object(obj).GetObjectKind().GroupVersionKind().Kind, err)
		}
	}
	if n != 3 {
		t.Fatalf("the manifest has %d objects, want 3", n)
	}
	awaitAllowed(t, e, "system:serviceaccount:"+system+":airlock", sandboxes, "create", "pods")
}

// awaitAllowed waits until the API server's authorizer grants user verb on
// resource ("pods", "pods/exec") in ns. A binding just made takes effect
// when the authorizer's informer sees it, not when its Create returns: the
// kube tier of a CI run once saw the backend's first pod refused to a
// binding made moments before.
func awaitAllowed(t *testing.T, e *env, user, ns, verb, resource string) {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: res, Subresource: sub},
	}}
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := e.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("review %s %s for %s: %v", verb, resource, user, err)
		}
		if r.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not granted %s %s in %s a minute after its binding: %s", user, verb, resource, ns, r.Status.Reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRBAC: airlock's least-privilege RBAC (deploy/kubernetes/rbac.yaml),
// applied to the test cluster, allows everything the backend does (a
// sandbox made, run, with its NetworkPolicy, destroyed) as its service
// account, impersonated against the real API server, and denies what it
// does not need: secrets, nodes, other namespaces' pods, pods it could not
// make, changing its own role.
func TestRBAC(t *testing.T) {
	e := needCluster(t)
	system, sandboxes := namespace(t, e), namespace(t, e)
	other := namespace(t, e)
	applyRBAC(t, e, system, sandboxes)
	as := rest.CopyConfig(e.rest)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + system + ":airlock"}
	client, err := kubernetes.NewForConfig(as)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(e, sandboxes)
	cfg.REST = as
	b, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Allowed: what the backend does.
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	var out bytes.Buffer
	if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"echo", "as airlock"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "as airlock\n" {
		t.Fatalf("a command as airlock's account: %+v %v %q", r, err, out.String())
	}
	if _, err := e.client.NetworkingV1().NetworkPolicies(sandboxes).Get(ctx, sb.ID(), metav1.GetOptions{}); err != nil {
		t.Errorf("the sandbox's network policy, made as airlock's account: %v", err)
	}
	// The WebSocket exec alone (no SPDY fallback, which would hide a
	// refusal: the backend falls back on a failed upgrade): the manifest's
	// get and create on pods/exec let it through; v1.37 refuses it to an
	// account granted either verb alone.
	if out, err := wsExec(ctx, as, sandboxes, sb.ID()); err != nil || !strings.Contains(out, "airlock-exec protocol") {
		t.Errorf("a WebSocket exec as airlock's account (pods/exec get, create) = %q, %v", out, err)
	}
	for _, verb := range []string{"get", "create"} {
		only := grantOnly(t, e, system, sandboxes, "exec-"+verb, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{verb}})
		if out, err := wsExec(ctx, only, sandboxes, sb.ID()); err == nil || strings.Contains(out, "airlock-exec") {
			t.Errorf("a WebSocket exec as an account with pods/exec %s alone = %q, %v; want it refused", verb, out, err)
		} else {
			t.Logf("pods/exec %s alone, WebSocket exec: %v", verb, err)
		}
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	// Denied: each must be Forbidden, not merely fail.
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"list secrets in its namespace", func() error {
			_, err := client.CoreV1().Secrets(sandboxes).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"get a secret in its namespace", func() error {
			_, err := client.CoreV1().Secrets(sandboxes).Get(ctx, "any", metav1.GetOptions{})
			return err
		}},
		{"list nodes", func() error {
			_, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list namespaces", func() error {
			_, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list pods in another namespace", func() error {
			_, err := client.CoreV1().Pods(other).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list pods in its own namespace (airlock-system)", func() error {
			_, err := client.CoreV1().Pods(system).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a pod in another namespace", func() error {
			spec := sandbox.Spec{Limits: sandbox.DefaultLimits}
			p := b.Pod("sb-elsewhere", &spec)
			p.Namespace = other
			_, err := client.CoreV1().Pods(other).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"update a pod", func() error {
			spec := sandbox.Spec{Limits: sandbox.DefaultLimits}
			_, err := client.CoreV1().Pods(sandboxes).Update(ctx, b.Pod("sb-x", &spec), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"attach to a pod", func() error {
			return client.CoreV1().RESTClient().Post().Resource("pods").Namespace(sandboxes).Name("sb-x").SubResource("attach").Do(ctx).Error()
		}},
		{"port-forward to a pod", func() error {
			return client.CoreV1().RESTClient().Post().Resource("pods").Namespace(sandboxes).Name("sb-x").SubResource("portforward").Do(ctx).Error()
		}},
		{"list network policies", func() error {
			_, err := client.NetworkingV1().NetworkPolicies(sandboxes).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"read its service account", func() error {
			_, err := client.CoreV1().ServiceAccounts(system).Get(ctx, "airlock", metav1.GetOptions{})
			return err
		}},
		{"change its own role", func() error {
			_, err := client.RbacV1().Roles(sandboxes).Get(ctx, "airlock-sandboxes", metav1.GetOptions{})
			return err
		}},
		{"make a role binding", func() error {
			rb := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "airlock", Namespace: system}},
			}
			_, err := client.RbacV1().RoleBindings(sandboxes).Create(ctx, rb, metav1.CreateOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !apierrors.IsForbidden(err) {
				t.Errorf("= %v, want Forbidden", err)
			}
		})
	}
}

// wsExec runs `airlock-exec version` in pod's sandbox container as cfg's
// user, over the WebSocket exec alone, and returns its output.
func wsExec(ctx context.Context, cfg *rest.Config, ns, pod string) (string, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: []string{"/.airlock/airlock-exec", "version"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	// Two buffers: the streams are copied by two goroutines.
	var out, errb bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
	return out.String() + errb.String(), err
}

// grantOnly makes a ServiceAccount name in system granted rule alone in
// sandboxes, and returns a configuration impersonating it.
func grantOnly(t *testing.T, e *env, system, sandboxes, name string, rule rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := context.Background()
	if _, err := e.client.CoreV1().ServiceAccounts(system).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := e.client.RbacV1().Roles(sandboxes).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: system}},
	}
	if _, err := e.client.RbacV1().RoleBindings(sandboxes).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + system + ":" + name
	awaitAllowed(t, e, user, sandboxes, rule.Verbs[0], rule.Resources[0])
	as := rest.CopyConfig(e.rest)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	return as
}

// TestRBACManifest: the manifest, without a cluster, holds a
// ServiceAccount, a namespaced Role and its binding, and no wildcard, no
// cluster-wide kind, no secrets.
func TestRBACManifest(t *testing.T) {
	data, err := os.ReadFile(rbacManifest)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		kinds = append(kinds, gvk.Kind)
		role, ok := obj.(*rbacv1.Role)
		if !ok {
			continue
		}
		for _, r := range role.Rules {
			for _, v := range append(append(append([]string{}, r.Verbs...), r.Resources...), r.APIGroups...) {
				if v == "*" || v == "secrets" || v == "escalate" || v == "bind" || v == "impersonate" {
					t.Errorf("rule %+v grants %q", r, v)
				}
			}
		}
	}
	if got := strings.Join(kinds, " "); got != "ServiceAccount Role RoleBinding" {
		t.Errorf("kinds %q, want ServiceAccount Role RoleBinding", got)
	}
}
