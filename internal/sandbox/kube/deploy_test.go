package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// deployManifests are airlock's own deployment: serve's replicas and their
// least-privilege RBAC (deploy/kubernetes).
var deployManifests = []string{"../../../deploy/kubernetes/airlock.yaml", rbacManifest}

// decodeManifests returns every object of the files.
func decodeManifests(t *testing.T, files ...string) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for doc := range strings.SplitSeq(string(data), "\n---\n") {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: decode %q: %v", f, doc, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// TestDeployManifests: deploy/kubernetes applies to a real API server
// (server-side dry run: validation, defaulting and admission, nothing
// stored), with its namespaces renamed to fresh ones the test makes (those
// and the ServiceAccounts for real); the
// replicas' pod template, as a pod in a namespace enforcing PodSecurity
// "restricted", is admitted, and refused once weakened; the Deployment
// runs as the ServiceAccount the RBAC binds.
func TestDeployManifests(t *testing.T) {
	e := needCluster(t)
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	renamed := map[string]string{"airlock-system": "airlock-system-" + suffix, "airlock-sandboxes": "airlock-sandboxes-" + suffix}
	rename := func(ns string) string {
		n, ok := renamed[ns]
		if !ok {
			t.Fatalf("the manifests name namespace %q", ns)
		}
		return n
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	objs := decodeManifests(t, deployManifests...)
	// The namespaces first, for real (what is in them is dry-run only),
	// as the manifest has them but for their names.
	for _, obj := range objs {
		ns, ok := obj.(*corev1.Namespace)
		if !ok {
			continue
		}
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, ns, dry); err != nil {
			t.Fatalf("dry-run namespace %s: %v", ns.Name, err)
		}
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("namespace %s does not enforce PodSecurity restricted", ns.Name)
		}
		made := ns.DeepCopy()
		made.Name = rename(ns.Name)
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, made, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.client.CoreV1().Namespaces().Delete(context.Background(), made.Name, metav1.DeleteOptions{})
		})
	}
	kinds := map[string]int{}
	var deploy *appsv1.Deployment
	var boundTo []string
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			kinds["Namespace"]++
			continue
		case *corev1.ServiceAccount:
			// For real: the replicas' pod below is admitted only with
			// its account there.
			o.Namespace = rename(o.Namespace)
			_, err = e.client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.CoreV1().Secrets(o.Namespace).Create(ctx, o, dry)
		case *corev1.ConfigMap:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, dry)
		case *corev1.Service:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.CoreV1().Services(o.Namespace).Create(ctx, o, dry)
		case *appsv1.Deployment:
			o.Namespace = rename(o.Namespace)
			deploy = o
			_, err = e.client.AppsV1().Deployments(o.Namespace).Create(ctx, o, dry)
		case *rbacv1.Role:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.RbacV1().Roles(o.Namespace).Create(ctx, o, dry)
		case *rbacv1.RoleBinding:
			o.Namespace = rename(o.Namespace)
			for i := range o.Subjects {
				o.Subjects[i].Namespace = rename(o.Subjects[i].Namespace)
				boundTo = append(boundTo, o.Subjects[i].Namespace+"/"+o.Subjects[i].Name)
			}
			_, err = e.client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, dry)
		default:
			t.Fatalf("the manifests have a %T, which the test does not apply", obj)
		}
		kind := fmt.Sprintf("%T", obj)
		kind = kind[strings.LastIndexByte(kind, '.')+1:]
		kinds[kind]++
		if err != nil {
			t.Errorf("dry-run %s: %v", kind, err)
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Secret", "ConfigMap", "Service", "Deployment", "Role", "RoleBinding"} {
		if kinds[k] == 0 {
			t.Errorf("the manifests have no %s (have %v)", k, kinds)
		}
	}
	if deploy == nil {
		t.Fatal("no Deployment")
	}
	if want := deploy.Namespace + "/" + deploy.Spec.Template.Spec.ServiceAccountName; len(boundTo) != 1 || boundTo[0] != want {
		t.Errorf("the Role is bound to %v; the replicas run as %s", boundTo, want)
	}
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas < 2 {
		t.Errorf("replicas %v; want at least two", deploy.Spec.Replicas)
	}
	// The replicas' pods under PodSecurity restricted, for real.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "airlock-replica", Namespace: deploy.Namespace}, Spec: deploy.Spec.Template.Spec}
	if _, err := e.client.CoreV1().Pods(deploy.Namespace).Create(ctx, pod, dry); err != nil {
		t.Errorf("a replica's pod in its restricted namespace: %v", err)
	}
	weak := pod.DeepCopy()
	weak.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	if _, err := e.client.CoreV1().Pods(deploy.Namespace).Create(ctx, weak, dry); err == nil || !strings.Contains(err.Error(), "restricted") {
		t.Errorf("a weakened replica pod = %v, want PodSecurity's refusal", err)
	}
}
