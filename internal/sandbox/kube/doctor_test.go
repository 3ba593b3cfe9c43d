package kube_test

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"

	"github.com/airlockrun/airlock/internal/sandbox/kube"
)

// TestDoctor: the backend's doctor, against the cluster's own answers.
// As airlock's service account under deploy/kubernetes/rbac.yaml, every
// check passes; as the cluster's admin, the required ones pass and the
// least-privilege ones warn (more than airlock needs); as an account
// granted pods get alone, the required ones it lacks fail.
func TestDoctor(t *testing.T) {
	e := needCluster(t)
	system, sandboxes := namespace(t, e), namespace(t, e)
	applyRBAC(t, e, system, sandboxes)
	airlock := rest.CopyConfig(e.rest)
	airlock.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + system + ":airlock"}
	podsGet := grantOnly(t, e, system, sandboxes, "pods-get", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}})
	for _, c := range []struct {
		name string
		rest *rest.Config
		// failed and warned are the findings that fail (required) and
		// warn, by name.
		failed, warned []string
	}{
		{name: "airlock", rest: airlock},
		{name: "admin", rest: e.rest, warned: []string{"rbac get secrets", "rbac update pods", "rbac create pods/attach", "rbac create pods/portforward"}},
		{name: "pods get alone", rest: podsGet, failed: []string{
			"rbac create pods", "rbac list pods", "rbac watch pods", "rbac delete pods", "rbac get pods/exec", "rbac create pods/exec",
			"rbac create networkpolicies", "rbac delete networkpolicies",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(e, sandboxes)
			cfg.REST = c.rest
			b, err := kube.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var failed, warned []string
			fs := b.Doctor(context.Background())
			if len(fs) != 14 || fs[0].Name != "api-server" || !fs[0].OK || !strings.Contains(fs[0].Detail, "v1.37") {
				t.Fatalf("findings %+v", fs)
			}
			for _, f := range fs {
				switch {
				case !f.OK && f.Required:
					failed = append(failed, f.Name)
				case !f.OK:
					warned = append(warned, f.Name)
				}
				if !strings.Contains(f.Detail, sandboxes) && f.Name != "api-server" {
					t.Errorf("%s: %q does not name the namespace", f.Name, f.Detail)
				}
			}
			if strings.Join(failed, ",") != strings.Join(c.failed, ",") || strings.Join(warned, ",") != strings.Join(c.warned, ",") {
				t.Errorf("failed %q warned %q; want %q and %q", failed, warned, c.failed, c.warned)
			}
		})
	}
}
