package kube

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Finding is one thing Doctor checked.
type Finding struct {
	// Name is short ("api-server", "rbac pods/exec get").
	Name string
	// OK says the check passed; Required says the backend cannot work
	// without it (a failed check that is not required is a warning).
	OK, Required bool
	Detail       string
}

// access is one access the backend's API calls need (need) or must not
// have (least privilege: a grant beyond them is a warning).
type access struct {
	group, resource, sub, verb string
	need                       bool
}

// accesses are what Doctor asks the API server about, in the sandboxes'
// namespace: what deploy/kubernetes/rbac.yaml grants, and a few things it
// must not.
func (b *Backend) accesses() []access {
	as := []access{
		{"", "pods", "", "create", true},
		{"", "pods", "", "get", true},
		{"", "pods", "", "list", true},
		{"", "pods", "", "watch", true},
		{"", "pods", "", "delete", true},
		{"", "pods", "exec", "get", true},
		{"", "pods", "exec", "create", true},
		// Least privilege: nothing the backend does needs these.
		{"", "secrets", "", "get", false},
		{"", "pods", "", "update", false},
		{"", "pods", "attach", "create", false},
		{"", "pods", "portforward", "create", false},
	}
	if !b.cfg.NoNetworkPolicy {
		as = append(as, access{"networking.k8s.io", "networkpolicies", "", "create", true},
			access{"networking.k8s.io", "networkpolicies", "", "delete", true})
	}
	return as
}

// Doctor checks, against the API server, what the backend needs: that it
// answers (its version), and that this client may do each thing the
// backend does in the sandboxes' namespace, and nothing of a few it must
// not (SelfSubjectAccessReview: the API server's own answer for these
// credentials). It creates nothing else.
func (b *Backend) Doctor(ctx context.Context) []Finding {
	v, err := b.client.Discovery().ServerVersion()
	if err != nil {
		return []Finding{{Name: "api-server", Required: true, Detail: fmt.Sprintf("%s: %v", b.cfg.REST.Host, err)}}
	}
	out := []Finding{{Name: "api-server", OK: true, Required: true, Detail: fmt.Sprintf("%s answers, Kubernetes %s", b.cfg.REST.Host, v.GitVersion)}}
	for _, a := range b.accesses() {
		res := a.resource
		if a.sub != "" {
			res += "/" + a.sub
		}
		name := fmt.Sprintf("rbac %s %s", a.verb, res)
		r, err := b.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: b.cfg.Namespace, Group: a.group, Resource: a.resource, Subresource: a.sub, Verb: a.verb,
			}},
		}, metav1.CreateOptions{})
		switch {
		case err != nil:
			out = append(out, Finding{Name: name, Required: a.need, Detail: fmt.Sprintf("cannot ask the API server: %v", err)})
		case a.need:
			d := "allowed in namespace " + b.cfg.Namespace
			if !r.Status.Allowed {
				d = "refused in namespace " + b.cfg.Namespace + ": sandboxes cannot be made (deploy/kubernetes/rbac.yaml grants it)"
			}
			out = append(out, Finding{Name: name, OK: r.Status.Allowed, Required: true, Detail: d})
		default:
			d := "refused in namespace " + b.cfg.Namespace + ", as least privilege wants"
			if r.Status.Allowed {
				d = "allowed in namespace " + b.cfg.Namespace + ": airlock does not need it (more privilege than deploy/kubernetes/rbac.yaml grants)"
			}
			out = append(out, Finding{Name: name, OK: !r.Status.Allowed, Detail: d})
		}
	}
	return out
}
