package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// The cluster these tests run against (scripts/kube-cluster.sh env prints
// them for its single-node cluster):
//
//	AIRLOCK_KUBECONFIG          kubeconfig of a cluster admin; unset skips every test
//	AIRLOCK_KUBE_NODE           node to bind pods to (default localhost; "" schedules)
//	AIRLOCK_KUBE_IMAGE          the sandbox image (default airlock.local/sandbox:test)
//	AIRLOCK_KUBE_EXECUTOR_IMAGE an image with /airlock-exec; unset builds one from
//	                            this tree and imports it through AIRLOCK_KUBE_CONTAINERD
//	AIRLOCK_KUBE_CONTAINERD     the node's containerd socket (ctr imports images there)
//	AIRLOCK_KUBE_SECCOMP        the kubelet's seccomp directory; the tests install
//	                            kube.SeccompProfile there
const (
	seccompName  = "airlock-sandbox.json"
	defaultImage = "airlock.local/sandbox:test"
)

// env is what the tests learned of the cluster, once.
type env struct {
	rest          *rest.Config
	client        kubernetes.Interface
	executorImage string
}

var cluster *env

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

// sharedSkips are skipped cases (conformanceSkips has their reason) that
// run in their group's sandbox, made before the case: RunSkipping's hook,
// at a backend's creation, does not reach them, so TestMain adds them to
// -test.skip. Each level's pattern matches only these three cases.
const sharedSkips = "^TestConformance$/^(Exec|Files)$/^(User|Owner|RoundTrip)$"

// parallel is -test.parallel on a cluster unless the command line sets
// it: the conformance suite's cases here wait for pods and API round
// trips more than for this machine's CPU, so more of them run at once
// than go test's default (GOMAXPROCS, 2 on the project's machine). 8 at
// once overloaded the test node at load 35 (pods not running within the
// suite's 60 s).
const parallel = "4"

func testMain(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
		if err := flag.Set("test.skip", sharedSkips); err != nil {
			fmt.Fprintln(os.Stderr, "kube tests:", err)
			return 1
		}
	}
	if os.Getenv("AIRLOCK_KUBECONFIG") == "" {
		return m.Run() // every cluster test skips, saying why
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", parallel); err != nil {
			fmt.Fprintln(os.Stderr, "kube tests:", err)
			return 1
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("AIRLOCK_KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube tests: kubeconfig:", err)
		return 1
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube tests:", err)
		return 1
	}
	e := &env{rest: cfg, client: client, executorImage: os.Getenv("AIRLOCK_KUBE_EXECUTOR_IMAGE")}
	if e.executorImage == "" {
		path, remove, err := sandboxtest.BuildExecutor()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kube tests:", err)
			return 1
		}
		e.executorImage, err = importExecutor(path)
		remove()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kube tests: executor image:", err)
			return 1
		}
	}
	if dir := os.Getenv("AIRLOCK_KUBE_SECCOMP"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "kube tests:", err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(dir, seccompName), kube.SeccompProfile(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "kube tests:", err)
			return 1
		}
	}
	cluster = e
	if ns := os.Getenv(creatorEnv); ns != "" {
		return creator(e, ns)
	}
	return m.Run()
}

// importExecutor makes a one-layer image of the executor at /airlock-exec,
// imports it into the node's containerd and returns its name.
func importExecutor(path string) (string, error) {
	sock := os.Getenv("AIRLOCK_KUBE_CONTAINERD")
	if sock == "" {
		return "", errors.New("set AIRLOCK_KUBE_EXECUTOR_IMAGE, or AIRLOCK_KUBE_CONTAINERD to import one built here")
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	name, archive, err := kube.ExecutorArchive(bin, "airlock.local/airlock-exec")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "import", "-")
	cmd.Stdin = bytes.NewReader(archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("ctr images import: %w: %s", err, out)
	}
	return name, nil
}

// needCluster skips t without a cluster.
func needCluster(t *testing.T) *env {
	t.Helper()
	if cluster == nil {
		t.Skip("no cluster: set AIRLOCK_KUBECONFIG (scripts/kube-cluster.sh up, then eval \"$(scripts/kube-cluster.sh env)\")")
	}
	return cluster
}

// namespace creates a namespace for t, which PodSecurity enforces
// "restricted" in, with the default ServiceAccount (no controller manager
// makes it on the test cluster), and deletes it at the end.
func namespace(t testing.TB, e *env) string {
	t.Helper()
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "airlock-test-" + hex.EncodeToString(b[:])
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := e.client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account: %v", err)
	}
	t.Cleanup(func() {
		// Without a namespace controller the namespace stays Terminating;
		// its pods are deleted by their sandboxes.
		_ = e.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func config(e *env, ns string) kube.Config {
	node, ok := os.LookupEnv("AIRLOCK_KUBE_NODE")
	if !ok {
		node = "localhost"
	}
	image := os.Getenv("AIRLOCK_KUBE_IMAGE")
	if image == "" {
		image = defaultImage
	}
	cfg := kube.Config{
		REST: e.rest, Namespace: ns, Image: image, ExecutorImage: e.executorImage,
		NodeName: node, PullPolicy: corev1.PullIfNotPresent,
	}
	if os.Getenv("AIRLOCK_KUBE_SECCOMP") != "" {
		cfg.SeccompProfile = seccompName
	}
	return cfg
}

func newBackend(t testing.TB, e *env, ns string) *kube.Backend {
	t.Helper()
	b, err := kube.New(config(e, ns))
	if err != nil {
		t.Fatalf("kube.New = %v", err)
	}
	return b
}

// TestPodRestricted: the API server's PodSecurity admission, enforcing
// "restricted", admits the backend's pod, and refuses it once a field it
// checks is weakened (so the admission is really there).
func TestPodRestricted(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	b := newBackend(t, e, ns)
	spec := sandbox.Spec{Limits: sandbox.DefaultLimits, Runtime: sandbox.RuntimeNative}
	ctx := context.Background()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	pod := b.Pod("sb-restricted", &spec)
	if _, err := e.client.CoreV1().Pods(ns).Create(ctx, pod, dry); err != nil {
		t.Fatalf("create the backend's pod in a restricted namespace = %v", err)
	}
	weak := b.Pod("sb-weak", &spec)
	weak.Spec.Containers[0].SecurityContext.Capabilities = nil
	_, err := e.client.CoreV1().Pods(ns).Create(ctx, weak, dry)
	if err == nil || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("create a pod that keeps its capabilities = %v, want PodSecurity's refusal", err)
	}
	if auto := pod.Spec.AutomountServiceAccountToken; auto == nil || *auto {
		t.Errorf("pod mounts a service account token")
	}
}

// TestRun: a command's output and status come back from a pod, which runs
// in its own network namespace with loopback only.
func TestRun(t *testing.T) {
	e := needCluster(t)
	b := newBackend(t, e, namespace(t, e))
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := sandbox.Run(ctx, sb, sandbox.Command{
		Argv:   []string{"sh", "-c", "echo hello; cat /proc/net/dev | sed 1,2d | cut -d: -f1; id -u; exit 3"},
		Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if r.Outcome != sandbox.OutcomeExited || r.ExitCode != 3 {
		t.Errorf("Run = %+v (stderr %q), want exit 3", r, errb.String())
	}
	lines := strings.Fields(out.String())
	if want := []string{"hello", "lo", "0"}; strings.Join(lines, " ") != strings.Join(want, " ") {
		t.Errorf("output = %q, want %q (hello, loopback as the only interface, root)", lines, want)
	}
	info := sb.Info()
	if info.Backend != "kubernetes" || !contains(info.Layers, "runtime:kubernetes") || !contains(info.Layers, "seccomp") {
		t.Errorf("Info = %+v, want backend kubernetes with runtime:kubernetes and seccomp layers", info)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestPodDeletedIsLost: a pod the cluster deletes is a lost sandbox.
func TestPodDeletedIsLost(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	b := newBackend(t, e, ns)
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	var zero int64
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), sb.ID(), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	select {
	case <-sb.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("sandbox not done two minutes after its pod was deleted")
	}
	_, err := sb.Start(context.Background(), sandbox.Command{Argv: []string{"true"}})
	if !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("Start after the pod's deletion = %v, want ErrLost", err)
	}
}

// TestRefused: what a pod cannot give is refused before any pod exists.
func TestRefused(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	b := newBackend(t, e, ns)
	for name, spec := range map[string]sandbox.Spec{
		"workspace": {Workspace: t.TempDir()},
		"user":      {User: "sandbox"},
		"gvisor":    {Runtime: sandbox.RuntimeGVisor},
	} {
		if _, err := b.Create(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "kubernetes backend") {
			t.Errorf("Create(%s) = %v, want the kubernetes backend's refusal", name, err)
		}
	}
	pods, err := e.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("refused specs left %d pods", len(pods.Items))
	}
}

// Reasons the kubernetes backend cannot pass a case yet.
const (
	noHostWorkspace = "a host workspace directory cannot reach a pod: the backend refuses Spec.Workspace (docs/kubernetes.md)"
	// A restricted pod runs as one non-root uid without CAP_SETUID, so
	// the executor's user namespace can map that one id only (the kernel
	// allows an unprivileged writer of uid_map its own id alone), as in
	// the linux backend's rootless mode, which skips the same cases:
	// there is root and no uid 1000 sandbox user. User-namespaced pods
	// (hostUsers: false, containerd 2 and later) would give the container
	// a range to map (docs/kubernetes.md).
	oneID = "a restricted pod's user namespace maps one id (root), as the linux backend's rootless mode: no uid 1000 sandbox user (docs/kubernetes.md)"
)

// conformanceSkips are the cases the kubernetes backend cannot pass yet,
// each with its reason (docs/kubernetes.md lists them too): the cases whose
// specs the backend refuses, and those that need more than one id.
var conformanceSkips = map[string]string{
	"Checkpoint/Cow":           noHostWorkspace,
	"Checkpoint/CowLowerLinks": noHostWorkspace,
	"Checkpoint/RW":            noHostWorkspace,
	"Checkpoint/RWStep":        noHostWorkspace,
	"Checkpoint/RO":            noHostWorkspace,
	"Checkpoint/MarkOnly":      noHostWorkspace,
	"Export/Diff":              noHostWorkspace,
	"Workspace/COW":            noHostWorkspace,
	"Workspace/RO":             noHostWorkspace,
	"Workspace/RW":             noHostWorkspace,
	"Exec/User":                oneID,
	"Files/Owner":              oneID,
	"Files/RoundTrip":          oneID,
	"Workspace/Empty":          oneID,
}

// TestConformance runs the sandbox contract against pods.
func TestConformance(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	sandboxtest.RunWith(t, func(t *testing.T) sandbox.Backend {
		return newBackend(t, e, ns)
	}, sandboxtest.Options{Skip: conformanceSkips, ParallelGroups: true})
}

// TestPolicy: each sandbox has a NetworkPolicy of its own that selects its
// pod alone and allows nothing in or out, owned by the pod, and gone with
// the sandbox; and a sandbox's direct connection to the node's bridge or
// to another sandbox's pod address fails whatever the cluster's network
// does (its network namespace has loopback alone), which the test
// cluster's CNI, enforcing no NetworkPolicy, would otherwise carry.
func TestPolicy(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	b := newBackend(t, e, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other := sandboxtest.Create(t, b, sandbox.Spec{})
	sb, err := b.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := e.client.NetworkingV1().NetworkPolicies(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sandbox's network policy: %v", err)
	}
	pod, err := e.client.CoreV1().Pods(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sel := pol.Spec.PodSelector.MatchLabels; len(sel) != 1 || sel["airlock.run/sandbox"] != sb.ID() {
		t.Errorf("policy selects %v, want its sandbox's pod alone", sel)
	}
	if len(pol.Spec.Ingress) != 0 || len(pol.Spec.Egress) != 0 || len(pol.Spec.PolicyTypes) != 2 {
		t.Errorf("policy %+v, want Ingress and Egress with no rule", pol.Spec)
	}
	if o := pol.OwnerReferences; len(o) != 1 || o[0].Kind != "Pod" || o[0].UID != pod.UID {
		t.Errorf("policy owners %+v, want the pod %s", o, pod.UID)
	}
	otherPod, err := e.client.CoreV1().Pods(ns).Get(ctx, other.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{otherPod.Status.PodIP, "10.244.0.1", pod.Status.HostIP} {
		if addr == "" {
			continue
		}
		var out bytes.Buffer
		r, err := sandbox.Run(ctx, sb, sandbox.Command{
			Argv:   []string{"bash", "-c", "exec 3<>/dev/tcp/" + addr + "/80 && echo connected"},
			Stdout: &out, Stderr: &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.ExitCode == 0 || !strings.Contains(out.String(), "unreachable") {
			t.Errorf("direct connect to %s: %+v %q, want Network is unreachable", addr, r, out.String())
		}
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.NetworkingV1().NetworkPolicies(ns).Get(ctx, sb.ID(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the policy after Destroy: %v, want not found", err)
	}
}
