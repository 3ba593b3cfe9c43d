package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/airlockrun/airlock/internal/sandbox/kube"
)

// airlockImage builds bin/ of this tree (airlock, airlock-host,
// airlock-exec, static) and imports a one-layer image of it, with an
// /etc/passwd naming the replicas' user, into the node's containerd; it
// returns the image's name.
func airlockImage(t *testing.T) string {
	t.Helper()
	sock := os.Getenv("AIRLOCK_KUBE_CONTAINERD")
	if sock == "" {
		t.Skip("AIRLOCK_KUBE_CONTAINERD unset: airlock's image is imported into the node's containerd (scripts/kube-cluster.sh env)")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/airlock", "./cmd/airlock-host", "./cmd/airlock-exec")
	build.Dir = "../../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bin/: %v\n%s", err, out)
	}
	files := []kube.ImageFile{
		{Name: "etc", Mode: 0o755, Dir: true},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nairlock:x:65532:65532:airlock:/var/lib/airlock:/sbin/nologin\n")},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nairlock:x:65532:\n")},
		{Name: "tmp", Mode: 0o1777, Dir: true},
		{Name: "usr", Mode: 0o755, Dir: true},
		{Name: "usr/local", Mode: 0o755, Dir: true},
		{Name: "usr/local/bin", Mode: 0o755, Dir: true},
	}
	for _, name := range []string{"airlock", "airlock-host", "airlock-exec"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, kube.ImageFile{Name: "usr/local/bin/" + name, Mode: 0o555, Data: data})
	}
	name, archive, err := kube.ImageArchive("airlock.local/airlock", []string{"/usr/local/bin/airlock"}, files)
	if err != nil {
		t.Fatal(err)
	}
	imp := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "import", "-")
	imp.Stdin = bytes.NewReader(archive)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v: %s", err, out)
	}
	return name
}

// TestDeployRun runs airlock itself from deploy/kubernetes on the test
// cluster: its image built from this tree; the manifests' namespaces
// (renamed), ServiceAccount, Role and RoleBinding, Secrets (fresh keys;
// the store SQLite in the replica's home), ConfigMap (serve.yaml with the
// sandboxes' namespace, images and node of the test cluster), Service and
// Deployment created for real; one replica's pod made from the
// Deployment's template (the test cluster has no controller manager to
// make it, nor a scheduler: its node is named). The pod becomes Ready
// (its /readyz probe), answers /readyz, and, through the E2B API, creates
// a sandbox pod in the sandboxes' namespace with its in-cluster
// credentials (the Role alone) and runs a command in it.
func TestDeployRun(t *testing.T) {
	e := needCluster(t)
	image := airlockImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d := applyDeploy(t, ctx, e, image, "sqlite", nil) // in the replica's home: one replica here
	system, sandboxes := d.system, d.sandboxes
	core := e.client.CoreV1()
	pod := d.startReplica(t, ctx, e, "airlock-0")
	got := d.waitReady(t, ctx, e, pod.Name)
	ip := got.Status.PodIP
	t.Logf("replica Ready at %s", ip)
	code, body := httpDo(t, ctx, "GET", "http://"+net.JoinHostPort(ip, "8080")+"/readyz", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("/readyz = %d %s", code, body)
	}

	// An E2B key, made in the replica's store by its own CLI (exec: the
	// test's admin may; the replica's account may not).
	if out, err := execIn(ctx, e, system, pod.Name, "/usr/local/bin/airlock", "tenants", "create", "acme"); err != nil {
		t.Fatalf("tenants create: %v: %s", err, out)
	}
	out, err := execIn(ctx, e, system, pod.Name, "/usr/local/bin/airlock", "keys", "create", "--tenant", "acme", "--name", "sdk", "--scope", "sandboxes", "--e2b")
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, out)
	}
	key := strings.TrimSpace(out)
	if before, err := core.Pods(sandboxes).List(ctx, metav1.ListOptions{}); err != nil || len(before.Items) != 0 {
		t.Fatalf("pods in %s before the create: %v %v", sandboxes, before, err)
	}
	hd := map[string]string{"X-API-KEY": key, "Content-Type": "application/json"}
	api := "http://" + net.JoinHostPort(ip, "3000")
	code, body = httpDo(t, ctx, "POST", api+"/sandboxes", hd, []byte(`{"templateID":"base"}`))
	var sb struct {
		ID    string `json:"sandboxID"`
		Token string `json:"envdAccessToken"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create a sandbox = %d %s\n%s", code, body, podLogs(ctx, e, system, pod.Name))
	}
	pods, err := core.Pods(sandboxes).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods in %s after the create: %v %v; want the sandbox's", sandboxes, pods, err)
	}
	t.Logf("sandbox %s is pod %s", sb.ID, pods.Items[0].Name)
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "echo hello from $(uname -s)"}}, "stdin": false})
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	code, body = httpDo(t, ctx, "POST", "http://"+net.JoinHostPort(ip, "49983")+"/process.Process/Start", map[string]string{
		"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49983",
		"X-Access-Token": sb.Token, "Content-Type": "application/connect+json",
	}, env)
	var stdout strings.Builder
	for _, m := range regexp.MustCompile(`"stdout":"([^"]*)"`).FindAllSubmatch(body, -1) {
		d, _ := base64.StdEncoding.DecodeString(string(m[1]))
		stdout.Write(d)
	}
	if code != http.StatusOK || stdout.String() != "hello from Linux\n" || !bytes.Contains(body, []byte(`"exited":true`)) {
		t.Fatalf("the command = %d %q (%s)", code, stdout.String(), body)
	}
	if code, body = httpDo(t, ctx, "DELETE", api+"/sandboxes/"+sb.ID, hd, nil); code != http.StatusNoContent {
		t.Fatalf("kill the sandbox = %d %s", code, body)
	}
	// The replica deletes the pod (its Role's delete).
	for {
		pods, err := core.Pods(sandboxes).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the killed sandbox's pod is still there: %s", pods.Items[0].Name)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deployed is airlock's deployment from the manifests on the test
// cluster (applyDeploy).
type deployed struct {
	// system and sandboxes are the manifests' namespaces, renamed.
	system, sandboxes string
	deploy            *appsv1.Deployment
	cfg               kube.Config
	// services are the Services created, by name.
	services map[string]*corev1.Service
	// podEdit, when not nil, edits each replica's pod before its creation
	// (startReplica): what the test cluster lacks (its DNS) or the test
	// needs.
	podEdit func(*corev1.Pod)
}

// applyDeploy creates the objects of deploy/kubernetes on the test cluster
// for real, the namespaces renamed: the ServiceAccount, Role and
// RoleBinding; the Secrets (fresh keys; the store's url storeURL, the
// manifests' when empty, and their ca.crt placeholder); the ConfigMap
// (serve.yaml with the test cluster's sandboxes, testServeYAML, then
// edit, if any, applied to it); the Service and the Deployment (its image
// image); and kube-root-ca.crt. The pods of both namespaces are deleted
// at t's end, then the namespaces.
func applyDeploy(t *testing.T, ctx context.Context, e *env, image, storeURL string, edit func(serve map[string]any)) *deployed {
	t.Helper()
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
	d := &deployed{system: renamed["airlock-system"], sandboxes: renamed["airlock-sandboxes"], services: map[string]*corev1.Service{}}
	core := e.client.CoreV1()
	d.cfg = config(e, d.sandboxes)
	newKey := func() string {
		var k [32]byte
		_, _ = rand.Read(k[:])
		return hex.EncodeToString(k[:])
	}
	objs := decodeManifests(t, deployManifests...)
	for _, obj := range objs {
		if ns, ok := obj.(*corev1.Namespace); ok {
			ns.Name = rename(ns.Name)
			if _, err := core.Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = core.Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
		}
	}
	// No namespace controller deletes what is in a deleted namespace: the
	// pods (the replicas and any sandbox left) go first.
	t.Cleanup(func() {
		for _, ns := range []string{d.system, d.sandboxes} {
			zero := int64(0)
			_ = core.Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		}
	})
	// What kube-controller-manager's root CA publisher makes in every
	// namespace, and the pod's projected token volume needs: the cluster's
	// CA, here the API server's self-signed certificate's.
	if len(e.rest.CAData) == 0 {
		t.Fatal("the kubeconfig has no certificate-authority-data")
	}
	rootCA := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(e.rest.CAData)}}
	if _, err := core.ConfigMaps(d.system).Create(ctx, rootCA, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
		case *corev1.ServiceAccount:
			o.Namespace = rename(o.Namespace)
			_, err = core.ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			o.Namespace = rename(o.Namespace)
			for k := range o.StringData {
				switch o.Name {
				case "airlock-store":
					if k == "url" && storeURL != "" {
						o.StringData[k] = storeURL
					}
				default:
					o.StringData[k] = newKey()
				}
			}
			_, err = core.Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			o.Namespace = rename(o.Namespace)
			if s, ok := o.Data["serve.yaml"]; ok {
				o.Data["serve.yaml"] = testServeYAML(t, s, d.cfg, d.sandboxes, edit)
			}
			_, err = core.ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			o.Namespace = rename(o.Namespace)
			var svc *corev1.Service
			if svc, err = core.Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err == nil {
				d.services[svc.Name] = svc
			}
		case *appsv1.Deployment:
			o.Namespace = rename(o.Namespace)
			c := &o.Spec.Template.Spec.Containers[0]
			c.Image, c.ImagePullPolicy = image, corev1.PullNever
			d.deploy = o
			_, err = e.client.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
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
			t.Fatalf("the manifests have a %T, which the test does not apply", obj)
		}
		if err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	if d.deploy == nil {
		t.Fatal("no Deployment")
	}
	awaitAllowed(t, e, "system:serviceaccount:"+d.system+":airlock", d.sandboxes, "create", "pods")
	return d
}

// startReplica creates a replica's pod named name: the Deployment's pod
// template as its ReplicaSet would make it, bound to the node (the test
// cluster has no controller manager to make it, nor a scheduler).
func (d *deployed) startReplica(t *testing.T, ctx context.Context, e *env, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.system, Labels: d.deploy.Spec.Template.Labels},
		Spec:       *d.deploy.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = d.cfg.NodeName
	if d.podEdit != nil {
		d.podEdit(pod)
	}
	if _, err := e.client.CoreV1().Pods(d.system).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the replica's pod: %v", err)
	}
	return pod
}

// waitReady waits for the replica's pod name to be Ready (its /readyz
// probe) and returns it; it fails t when the replica ends or restarts
// first, or ctx ends, with its log.
func (d *deployed) waitReady(t *testing.T, ctx context.Context, e *env, name string) *corev1.Pod {
	t.Helper()
	core := e.client.CoreV1()
	for {
		got, err := core.Pods(d.system).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range got.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		if got.Status.Phase == corev1.PodFailed || got.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("the replica %s ended: %+v\n%s", name, got.Status, podLogs(ctx, e, d.system, name))
		}
		if len(got.Status.ContainerStatuses) > 0 && got.Status.ContainerStatuses[0].RestartCount > 0 {
			lc, _ := e.client.CoreV1().Pods(d.system).GetLogs(name, &corev1.PodLogOptions{Previous: true}).DoRaw(context.Background())
			t.Fatalf("the replica %s ended and was restarted: %+v\nits first run's log:\n%s", name, got.Status.ContainerStatuses[0].LastTerminationState, lc)
		}
		if ready {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica %s is not Ready: %+v\n%s", name, got.Status, podLogs(ctx, e, d.system, name))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// testServeYAML is the manifests' serve.yaml with the test cluster's
// sandboxes: namespace, images, node, seccomp profile; no warm pool; then
// edit, if any, applied to it.
func testServeYAML(t *testing.T, manifest string, cfg kube.Config, namespace string, edit func(map[string]any)) string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(manifest), &doc); err != nil {
		t.Fatal(err)
	}
	sbx, _ := doc["sandboxes"].(map[string]any)
	k, _ := sbx["kubernetes"].(map[string]any)
	if k == nil {
		t.Fatalf("serve.yaml has no sandboxes.kubernetes: %s", manifest)
	}
	k["namespace"], k["image"], k["executor_image"], k["pull_policy"], k["node_name"] = namespace, cfg.Image, cfg.ExecutorImage, "Never", cfg.NodeName
	if cfg.SeccompProfile != "" {
		k["seccomp_profile"] = cfg.SeccompProfile
	} else {
		delete(k, "seccomp_profile")
	}
	doc["sandbox_pool"] = map[string]any{"per_spec": 0}
	if edit != nil {
		edit(doc)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// freshClient makes each request on a connection of its own (no
// keep-alive): a request to a Service's clusterIP is a connection its
// rules spread, as kube-proxy's spread connections, not requests.
var freshClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// httpDo sends one request (a connection of its own) and returns the
// status and the body.
func httpDo(t *testing.T, ctx context.Context, method, url string, hd map[string]string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hd {
		req.Header.Set(k, v)
	}
	res, err := freshClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// execIn runs argv in pod's first container as the test's admin and
// returns its stdout (stderr too on a failure).
func execIn(ctx context.Context, e *env, ns, pod string, argv ...string) (string, error) {
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(e.rest, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var out, errb bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb}); err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// podLogs is what the pod's container wrote, for a failure's message
// (ctx's deadline may have passed: a context of its own).
func podLogs(_ context.Context, e *env, ns, pod string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := e.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(logs: %v)", err)
	}
	return string(b)
}
