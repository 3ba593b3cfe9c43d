package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestServeSandboxesConfig: the sandboxes section's defaults, and every
// problem of a kubernetes section named in one error.
func TestServeSandboxesConfig(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := KubeConfig{Kubeconfig: kc, Image: "img", ExecutorImage: "exe"}
	with := func(f func(*KubeConfig)) ServeSandboxes {
		k := good
		f(&k)
		return ServeSandboxes{Backend: BackendKubernetes, Kubernetes: k}
	}
	for _, c := range []struct {
		name string
		in   ServeSandboxes
		want []string // substrings of the error; none: valid
	}{
		{name: "default native", in: ServeSandboxes{}},
		{name: "native ignores the section", in: ServeSandboxes{Backend: BackendNative, Kubernetes: KubeConfig{Namespace: "Bad_"}}},
		{name: "unknown backend", in: ServeSandboxes{Backend: "docker"}, want: []string{`sandboxes.backend "docker"`}},
		{name: "kubernetes", in: with(func(*KubeConfig) {})},
		{name: "in-cluster", in: with(func(k *KubeConfig) { k.Kubeconfig, k.InCluster = "", true })},
		{name: "no images", in: with(func(k *KubeConfig) { k.Image, k.ExecutorImage = "", "" }), want: []string{"image: the sandboxes' root", "executor_image:"}},
		{name: "both credentials", in: with(func(k *KubeConfig) { k.InCluster = true }), want: []string{"kubeconfig and in_cluster"}},
		{name: "context without file", in: with(func(k *KubeConfig) { k.Kubeconfig, k.Context = "", "x" }), want: []string{"context: only with kubeconfig"}},
		{name: "namespace", in: with(func(k *KubeConfig) { k.Namespace = "-x" }), want: []string{`namespace "-x"`}},
		{name: "long namespace", in: with(func(k *KubeConfig) { k.Namespace = strings.Repeat("a", 64) }), want: []string{"longer than 63"}},
		{name: "pull policy", in: with(func(k *KubeConfig) { k.PullPolicy = "Sometimes" }), want: []string{`pull_policy "Sometimes"`}},
		{name: "runtime classes", in: with(func(k *KubeConfig) { k.RuntimeClasses = map[string]string{"gvisor": "runsc", "kata": "kata"} }), want: []string{`runtime "kata"`}},
		{name: "runtime class name", in: with(func(k *KubeConfig) { k.RuntimeClasses = map[string]string{"gvisor": "Run SC"} }), want: []string{`RuntimeClass "Run SC"`}},
		{name: "requests", in: with(func(k *KubeConfig) { k.CPURequest, k.MemoryRequest = "lots", "-1Mi" }), want: []string{`cpu_request "lots"`, `memory_request "-1Mi"`}},
		{name: "grace", in: with(func(k *KubeConfig) { k.DetachedGrace = 25 * time.Hour }), want: []string{"detached_grace 25h0m0s"}},
		{name: "sweep", in: with(func(k *KubeConfig) { k.SweepEvery = time.Millisecond }), want: []string{"sweep_every 1ms"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.in.WithDefaults().Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("valid; want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	d := ServeSandboxes{Backend: BackendKubernetes}.WithDefaults().Kubernetes
	if d.Namespace != "airlock-sandboxes" || d.DetachedGrace != 2*time.Minute || d.SweepEvery != time.Minute {
		t.Errorf("defaults: %+v", d)
	}
	k := good
	k.CPURequest, k.MemoryRequest, k.Namespace = "0.25", "96Mi", "sbx"
	cfg, err := k.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CPURequest != 250 || cfg.MemoryRequest != 96<<20 || cfg.Namespace != "sbx" {
		t.Errorf("kube.Config %+v", cfg)
	}
	b, err := NewKube(k)
	if err != nil || b == nil {
		t.Fatalf("NewKube: %v", err)
	}
	// No API server there: doctor says so, as a required failure.
	rep := DoctorKube(context.Background(), k)
	if len(rep) != 2 || !rep[0].OK || rep[1].OK || !rep[1].Required || !strings.Contains(rep[1].Detail, "127.0.0.1:1") {
		t.Errorf("doctor without a cluster: %+v", rep)
	}
}

// TestDeployConfig: the serve configuration deploy/kubernetes/airlock.yaml
// ships is valid as it is (known fields only), names the kubernetes
// backend in-cluster, and its sandboxes' namespace is the one rbac.yaml
// grants.
func TestDeployConfig(t *testing.T) {
	data, err := os.ReadFile("../../deploy/kubernetes/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var serveYAML string
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var obj struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "ConfigMap" {
			serveYAML = obj.Data["serve.yaml"]
		}
	}
	if serveYAML == "" {
		t.Fatal("no ConfigMap with serve.yaml")
	}
	var cfg ServeConfig
	dec := yaml.NewDecoder(strings.NewReader(serveYAML))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults(nil)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k := cfg.Sandboxes.Kubernetes
	if cfg.Sandboxes.Backend != BackendKubernetes || !k.InCluster || k.Namespace != "airlock-sandboxes" || k.SeccompProfile == "" {
		t.Errorf("sandboxes %+v", cfg.Sandboxes)
	}
	// E2B across the replicas: both listeners, the shared key, and pods
	// that outlive a dead replica until another takes them over (its
	// lease, then up to one sweep).
	if !cfg.E2B.Enabled() || cfg.E2B.SealKeyFile == "" {
		t.Errorf("e2b %+v: want the API on, with seal_key_file", cfg.E2B)
	}
	if takeover := 4*cfg.E2B.MeterInterval + 30*time.Second; k.DetachedGrace <= takeover {
		t.Errorf("kubernetes.detached_grace %s: a dead replica's E2B sandbox is taken over up to %s after its last renewal; want longer", k.DetachedGrace, takeover)
	}
	rbac, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rbac), "namespace: "+k.Namespace) {
		t.Errorf("rbac.yaml grants nothing in %s", k.Namespace)
	}
}
