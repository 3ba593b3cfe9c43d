package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
)

// The kubernetes backend under airlock serve, on a real cluster
// (scripts/kube-cluster.sh; make test-kube runs these): AIRLOCK_KUBECONFIG
// a cluster admin's kubeconfig, AIRLOCK_KUBE_CONTAINERD the node's
// containerd (the executor image built from this tree is imported there),
// AIRLOCK_KUBE_SECCOMP the kubelet's seccomp directory. Without them the
// tests skip.

// kubeCluster is a sandbox namespace of the test cluster for t, and the
// sandboxes section of serve's configuration that uses it.
type kubeCluster struct {
	client    kubernetes.Interface
	namespace string
	conf      string
}

// needKube skips t without a cluster; else it makes a namespace (deleted
// at t's end), imports the executor exe as an image and returns the
// configuration naming both.
func needKube(t *testing.T, exe string) *kubeCluster {
	t.Helper()
	kc, sock, seccomp := os.Getenv("AIRLOCK_KUBECONFIG"), os.Getenv("AIRLOCK_KUBE_CONTAINERD"), os.Getenv("AIRLOCK_KUBE_SECCOMP")
	if kc == "" || sock == "" || seccomp == "" {
		t.Skip("no cluster: set AIRLOCK_KUBECONFIG, AIRLOCK_KUBE_CONTAINERD and AIRLOCK_KUBE_SECCOMP (make test-kube; scripts/kube-cluster.sh up, then eval \"$(scripts/kube-cluster.sh env)\")")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	image, archive, err := kube.ExecutorArchive(bin, "airlock.local/airlock-exec")
	if err != nil {
		t.Fatal(err)
	}
	imp := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "import", "-")
	imp.Stdin = bytes.NewReader(archive)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v: %s", err, out)
	}
	const profile = "airlock-serve-test.json"
	if err := os.MkdirAll(seccomp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(seccomp, profile), kube.SeccompProfile(), 0o644); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	ns := "airlock-serve-" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// No controller manager on the test cluster: the default account is
	// the test's to make.
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("sandbox_pool:\n  per_spec: 0\nsandboxes:\n  backend: kubernetes\n  kubernetes:\n"+
		"    kubeconfig: %s\n    namespace: %s\n    image: airlock.local/sandbox:test\n    executor_image: %s\n"+
		"    pull_policy: Never\n    node_name: localhost\n    seccomp_profile: %s\n    detached_grace: 3s\n    sweep_every: 1s\n",
		kc, ns, image, profile)
	return &kubeCluster{client: client, namespace: ns, conf: conf}
}

// pods returns the names of the namespace's pods.
func (k *kubeCluster) pods(t *testing.T) []string {
	t.Helper()
	l, err := k.client.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestServeReplicasKubernetes: two airlock serve replicas on one
// PostgreSQL, their sandboxes pods of the cluster. A run created through
// A is driven by A in a pod; A is killed (SIGKILL) in the middle of a
// step; once its lease lapses B resumes the run in a new pod from the
// last checkpoint, and the run completes with both steps' files. The
// record names the backend and each pod; A's orphaned pod ends after the
// detached grace and a replica's sweep deletes it; B's is destroyed with
// the run; the namespace is empty at the end.
func TestServeReplicasKubernetes(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "alk-")
	homeB := moreHome(t)
	k := needKube(t, exe)
	key := pgKey(t, homeA, exe, url)
	st := pgStore(t, url)

	a := startServeConf(t, homeA, exe, url, 1, k.conf)
	script := "turns:\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"echo one > one.txt\"}\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"touch started; sleep 30; echo two > two.txt\"}\n" +
		"  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	run := createRun(t, a.url, key, map[string]any{
		"task": "a run on the cluster", "script": script,
		"verify": map[string]any{"commands": []string{"grep -qx one one.txt && grep -qx two two.txt"}},
	})
	waitEvent(t, st, run.ID, event.TypeRunStarted)
	// A drives it (B, started now, did not take it); its second step is
	// in flight (the first's checkpoint taken) when A dies.
	b := startServeConf(t, homeB, exe, url, 1, k.conf)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		evs, err := st.Events(context.Background(), run.ID, 1, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if countType(evs, event.TypeToolStarted) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's second step did not start in 3 minutes: %v", evTypes(evs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // inside the sleep
	podsOfA := k.pods(t)
	if len(podsOfA) != 1 {
		t.Fatalf("pods while A drives: %v; want one", podsOfA)
	}
	a.kill()
	// B takes the run over once A's lease lapses.
	waitRunLong(t, b.url, key, run.ID, 4*time.Minute, "completed")

	evs := runEvents(t, st, run.ID)
	started, resumed := drives(t, evs)
	if len(started) != 1 || started[0] != a.host() || len(resumed) != 1 || resumed[0].Host != b.host() {
		t.Errorf("drives: started %v, resumed %+v; want started by A (%s), resumed by %s", started, resumed, a.host(), b.host())
	}
	var provisioned []event.SandboxProvisioned
	for _, e := range evs {
		if e.Type == event.TypeSandboxProvisioned {
			var p event.SandboxProvisioned
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			provisioned = append(provisioned, p)
		}
	}
	if len(provisioned) != 2 || provisioned[0].SandboxID != podsOfA[0] || provisioned[1].SandboxID == podsOfA[0] {
		t.Errorf("sandbox.provisioned %+v; want A's pod %s, then another", provisioned, podsOfA[0])
	}
	for _, p := range provisioned {
		if p.Backend != "kubernetes" {
			t.Errorf("sandbox %s's backend %q, want kubernetes", p.SandboxID, p.Backend)
		}
	}
	// A's pod, orphaned: its relay ends it after the grace, a sweep
	// deletes it; B's went with the run.
	deadline = time.Now().Add(2 * time.Minute)
	for left := k.pods(t); len(left) > 0; left = k.pods(t) {
		if time.Now().After(deadline) {
			t.Fatalf("pods left: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code := stopProc(t, b); code != 0 {
		t.Errorf("B exited %d", code)
	}
	if !slices.Contains(evTypes(evs), string(event.TypeRunCompleted)) {
		t.Errorf("events %v", evTypes(evs))
	}
}

// waitRunLong is waitRun with a deadline of d.
func waitRunLong(t *testing.T, base, key, id string, d time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, b := call(t, "GET", base+"/v1/runs/"+id, key, nil)
		var r apiRun
		if st != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("GET run = %d %s", st, b)
		}
		if slices.Contains(want, r.Status) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after %s, want %v", id, r.Status, d, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
