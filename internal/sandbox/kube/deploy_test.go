package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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
	var secrets []*corev1.Secret
	var configMaps []*corev1.ConfigMap
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
			secrets = append(secrets, o)
		case *corev1.ConfigMap:
			o.Namespace = rename(o.Namespace)
			_, err = e.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, dry)
			configMaps = append(configMaps, o)
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
	t.Run("E2B", func(t *testing.T) { testDeployE2B(t, e, pod, secrets, configMaps) })
}

// testDeployE2B runs a replica's pod of the manifests for real, its
// container a shell of the tests' image in airlock's place, with what the
// manifests give it (its Secrets and ConfigMap made for real, the E2B key
// a fresh one): the replica's user (65532, restricted) reads the key at
// serve.yaml's e2b.seal_key_file, and AIRLOCK_E2B_ADVERTISE_HOST, the
// address the other replicas relay to, is the pod's own IP.
func testDeployE2B(t *testing.T, e *env, replica *corev1.Pod, secrets []*corev1.Secret, configMaps []*corev1.ConfigMap) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := replica.Namespace
	var serveYAML string
	for _, cm := range configMaps {
		if _, err := e.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if s, ok := cm.Data["serve.yaml"]; ok {
			serveYAML = s
		}
	}
	var serve struct {
		E2B struct {
			APIAddr     string `yaml:"api_addr"`
			SandboxAddr string `yaml:"sandbox_addr"`
			SealKeyFile string `yaml:"seal_key_file"`
		} `yaml:"e2b"`
	}
	if err := yaml.Unmarshal([]byte(serveYAML), &serve); err != nil {
		t.Fatal(err)
	}
	keyFile := serve.E2B.SealKeyFile
	if keyFile == "" || serve.E2B.APIAddr == "" || serve.E2B.SandboxAddr == "" {
		t.Fatalf("serve.yaml's e2b section %+v: want both listeners and a seal_key_file", serve.E2B)
	}
	var kb [32]byte
	_, _ = rand.Read(kb[:])
	key := hex.EncodeToString(kb[:])
	// The policy credentials' key (AIRLOCK_SECRET_KEY_FILE), a Secret's
	// file too: a fresh one of its own.
	secretsKeyFile := ""
	for _, v := range replica.Spec.Containers[0].Env {
		if v.Name == "AIRLOCK_SECRET_KEY_FILE" {
			secretsKeyFile = v.Value
		}
	}
	if secretsKeyFile == "" {
		t.Fatal("the replicas' container has no AIRLOCK_SECRET_KEY_FILE: each would seal the shared store's credentials under a key of its own")
	}
	_, _ = rand.Read(kb[:])
	secretsKey := hex.EncodeToString(kb[:])
	keySecret, secretsKeySecret := "", ""
	for _, sec := range secrets {
		sec = sec.DeepCopy()
		for k := range sec.StringData {
			if strings.HasSuffix(keyFile, "/"+k) {
				sec.StringData[k] = key
				keySecret = sec.Name
			}
			if sec.Name != keySecret && strings.HasSuffix(secretsKeyFile, "/"+k) {
				sec.StringData[k] = secretsKey
				secretsKeySecret = sec.Name
			}
		}
		if _, err := e.client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if keySecret == "" || secretsKeySecret == "" {
		t.Fatalf("no Secret of the manifests has a key named as %s (%q) or as %s (%q)", keyFile, keySecret, secretsKeyFile, secretsKeySecret)
	}

	pod := replica.DeepCopy()
	pod.Name = "airlock-e2b-replica"
	cfg := config(e, ns)
	pod.Spec.NodeName = cfg.NodeName
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever // a Deployment's is Always
	// The test cluster has no controller manager to publish
	// kube-root-ca.crt, which the token's projected volume needs.
	pod.Spec.AutomountServiceAccountToken = new(bool)
	c := &pod.Spec.Containers[0]
	c.Image, c.ImagePullPolicy = cfg.Image, cfg.PullPolicy
	// The credentials' key file as the replica sees it: a regular file
	// (not the volume's link, which airlock refuses), root's, readable
	// by the replica's group alone: what secret.KeyFile accepts from a
	// Secret volume (keyFileOwner).
	c.Command = []string{"/bin/sh", "-c", `echo "advertise=$AIRLOCK_E2B_ADVERTISE_HOST"; echo "id=$(id -u)"; echo "key=$(cat "$0")"; ` +
		`echo "skey=$(cat "$AIRLOCK_SECRET_KEY_FILE")"; echo "sstat=$(stat -c '%u %g %a %F' "$AIRLOCK_SECRET_KEY_FILE")"`, keyFile}
	c.Args, c.ReadinessProbe, c.LivenessProbe = nil, nil, nil
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == keySecret && strings.HasPrefix(keyFile, m.MountPath+"/") {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the replicas' container mounts no volume of Secret %s where serve.yaml reads %s", keySecret, keyFile)
	}
	pods := e.client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a replica's pod: %v", err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	var got *corev1.Pod
	for {
		var err error
		got, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica's pod did not end: %+v", got.Status)
		case <-time.After(200 * time.Millisecond):
		}
	}
	logs, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("advertise=%s\nid=65532\nkey=%s\nskey=%s\nsstat=0 65532 440 regular file\n", got.Status.PodIP, key, secretsKey)
	if got.Status.Phase != corev1.PodSucceeded || got.Status.PodIP == "" || string(logs) != want {
		t.Errorf("the replica's pod %s (IP %q) wrote %q, want %q", got.Status.Phase, got.Status.PodIP, logs, want)
	}
}

// TestDeployStoreTLS (no cluster): the manifests' store URL asks for TLS
// with the server's certificate checked (sslmode verify-full, the
// Service's DNS name), and its sslrootcert is a file the replicas have:
// the Secret airlock-store's ca.crt, mounted alone (not the URL, which
// holds the password) where the URL names it; AIRLOCK_STORE is the
// Secret's url.
func TestDeployStoreTLS(t *testing.T) {
	var store *corev1.Secret
	var deploy *appsv1.Deployment
	for _, obj := range decodeManifests(t, deployManifests...) {
		switch o := obj.(type) {
		case *corev1.Secret:
			if o.Name == "airlock-store" {
				store = o
			}
		case *appsv1.Deployment:
			deploy = o
		}
	}
	if store == nil || deploy == nil {
		t.Fatal("no Secret airlock-store or no Deployment")
	}
	u, err := url.Parse(store.StringData["url"])
	if err != nil {
		t.Fatalf("the store URL: %v", err)
	}
	q := u.Query()
	root := q.Get("sslrootcert")
	if q.Get("sslmode") != "verify-full" || root == "" || u.Hostname() != "postgres."+store.Namespace+".svc" {
		t.Errorf("the store URL %s: want sslmode=verify-full, an sslrootcert, host postgres.%s.svc", u.Redacted(), store.Namespace)
	}
	if _, ok := store.StringData["ca.crt"]; !ok {
		t.Error("the Secret airlock-store has no ca.crt")
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	fromSecret := false
	for _, v := range c.Env {
		if v.Name == "AIRLOCK_STORE" && v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
			fromSecret = v.ValueFrom.SecretKeyRef.Name == store.Name && v.ValueFrom.SecretKeyRef.Key == "url"
		}
	}
	if !fromSecret {
		t.Error("AIRLOCK_STORE is not the Secret airlock-store's url")
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath != path.Dir(root) || m.SubPath != "" {
			continue
		}
		for _, v := range deploy.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil || v.Secret.SecretName != store.Name {
				continue
			}
			items := v.Secret.Items
			mounted = len(items) == 1 && items[0].Key == "ca.crt" && items[0].Path == path.Base(root)
		}
	}
	if !mounted {
		t.Errorf("no volume of the Secret %s's ca.crt alone is mounted as %s", store.Name, root)
	}
}
