package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// Sandbox backends serve may make its sandboxes with (ServeSandboxes).
const (
	BackendNative     = "native"
	BackendKubernetes = "kubernetes"
)

// ServeSandboxes says what makes serve's sandboxes (its runs', its E2B
// API's, its MCP sessions'): the native backend on this machine, or pods
// of a Kubernetes cluster (docs/kubernetes.md). The warm pool
// (sandbox_pool) is over either.
type ServeSandboxes struct {
	// Backend is native (the default) or kubernetes.
	Backend    string     `yaml:"backend"`
	Kubernetes KubeConfig `yaml:"kubernetes"`
}

// KubeConfig configures the kubernetes backend (kube.Config).
type KubeConfig struct {
	// Kubeconfig is the file of the cluster's credentials; empty uses the
	// pod's own service account (in-cluster), which InCluster asks for
	// explicitly. Context is one of the file's contexts (empty: its
	// current one).
	Kubeconfig string `yaml:"kubeconfig,omitempty"`
	InCluster  bool   `yaml:"in_cluster,omitempty"`
	Context    string `yaml:"context,omitempty"`
	// Namespace holds the sandboxes' pods (default airlock-sandboxes).
	Namespace string `yaml:"namespace,omitempty"`
	// Image is the sandboxes' root; ExecutorImage holds /airlock-exec.
	Image         string `yaml:"image,omitempty"`
	ExecutorImage string `yaml:"executor_image,omitempty"`
	// PullPolicy is Always, IfNotPresent or Never (empty: the cluster's
	// default).
	PullPolicy string `yaml:"pull_policy,omitempty"`
	// NodeName binds every pod to one node (no scheduler); empty lets the
	// scheduler place them.
	NodeName string `yaml:"node_name,omitempty"`
	// RuntimeClasses maps a sandbox runtime (a policy's or a template's
	// sandbox.runtime: native or gvisor) to a RuntimeClass: gvisor to
	// the cluster's runsc handler, native to kata's, say.
	RuntimeClasses map[string]string `yaml:"runtime_classes,omitempty"`
	// SeccompProfile is the pods' Localhost profile, relative to the
	// kubelet's seccomp directory (kube.SeccompProfile is one): the
	// runtime's default refuses the executor's user namespace.
	SeccompProfile string `yaml:"seccomp_profile,omitempty"`
	// CPURequest and MemoryRequest are each sandbox's requests, as
	// Kubernetes quantities ("10m", "64Mi"); the limits are the spec's.
	CPURequest    string `yaml:"cpu_request,omitempty"`
	MemoryRequest string `yaml:"memory_request,omitempty"`
	// NoNetworkPolicy stops the NetworkPolicy per sandbox (the sandbox's
	// isolation does not rest on it).
	NoNetworkPolicy bool `yaml:"no_network_policy,omitempty"`
	// DetachedGrace is how long a sandbox outlives the last replica
	// connected to it, waiting for another to attach (default 2m).
	DetachedGrace time.Duration `yaml:"detached_grace,omitempty"`
	// SweepEvery is how often this replica deletes the pods of sandboxes
	// that ended with no replica (default 1m).
	SweepEvery time.Duration `yaml:"sweep_every,omitempty"`
}

const (
	defaultKubeNamespace     = "airlock-sandboxes"
	defaultKubeDetachedGrace = 2 * time.Minute
	defaultKubeSweepEvery    = time.Minute
)

// WithDefaults fills what s leaves unset.
func (s ServeSandboxes) WithDefaults() ServeSandboxes {
	if s.Backend == "" {
		s.Backend = BackendNative
	}
	if s.Backend != BackendKubernetes {
		return s
	}
	k := &s.Kubernetes
	if k.Namespace == "" {
		k.Namespace = defaultKubeNamespace
	}
	if k.DetachedGrace == 0 {
		k.DetachedGrace = defaultKubeDetachedGrace
	}
	if k.SweepEvery == 0 {
		k.SweepEvery = defaultKubeSweepEvery
	}
	return s
}

// Validate reports every problem of a resolved s.
func (s ServeSandboxes) Validate() error {
	switch s.Backend {
	case BackendNative:
		return nil
	case BackendKubernetes:
	default:
		return fmt.Errorf("sandboxes.backend %q: want native or kubernetes", s.Backend)
	}
	_, err := s.Kubernetes.config()
	return err
}

// config is k as kube.Config, without the API server's (rest).
func (k KubeConfig) config() (kube.Config, error) {
	var errs []error
	p := "sandboxes.kubernetes."
	if k.Kubeconfig != "" && k.InCluster {
		errs = append(errs, errors.New(p+"kubeconfig and in_cluster: give one (neither: in-cluster)"))
	}
	if k.Context != "" && k.Kubeconfig == "" {
		errs = append(errs, errors.New(p+"context: only with kubeconfig"))
	}
	if k.Image == "" {
		errs = append(errs, errors.New(p+"image: the sandboxes' root image is required"))
	}
	if k.ExecutorImage == "" {
		errs = append(errs, errors.New(p+"executor_image: an image holding /airlock-exec is required"))
	}
	if msgs := validationMessages(k.Namespace); msgs != "" {
		errs = append(errs, fmt.Errorf(p+"namespace %q: %s", k.Namespace, msgs))
	}
	cfg := kube.Config{
		Namespace: k.Namespace, Image: k.Image, ExecutorImage: k.ExecutorImage, NodeName: k.NodeName,
		RuntimeClasses: k.RuntimeClasses, SeccompProfile: k.SeccompProfile, NoNetworkPolicy: k.NoNetworkPolicy,
		DetachedGrace: k.DetachedGrace,
	}
	switch pp := corev1.PullPolicy(k.PullPolicy); pp {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		cfg.PullPolicy = pp
	default:
		errs = append(errs, fmt.Errorf(p+"pull_policy %q: want Always, IfNotPresent or Never", k.PullPolicy))
	}
	for rt, rc := range k.RuntimeClasses {
		if rt == "" || !sandbox.ValidRuntime(rt) {
			errs = append(errs, fmt.Errorf(p+"runtime_classes: runtime %q: want native or gvisor", rt))
		}
		if msgs := validationMessages(rc); msgs != "" {
			errs = append(errs, fmt.Errorf(p+"runtime_classes: %s: RuntimeClass %q: %s", rt, rc, msgs))
		}
	}
	if k.CPURequest != "" {
		q, err := resource.ParseQuantity(k.CPURequest)
		if err != nil || q.Sign() <= 0 {
			errs = append(errs, fmt.Errorf(p+"cpu_request %q: want a positive quantity (10m, 0.5)", k.CPURequest))
		} else {
			cfg.CPURequest = q.MilliValue()
		}
	}
	if k.MemoryRequest != "" {
		q, err := resource.ParseQuantity(k.MemoryRequest)
		if err != nil || q.Sign() <= 0 {
			errs = append(errs, fmt.Errorf(p+"memory_request %q: want a positive quantity (64Mi)", k.MemoryRequest))
		} else {
			cfg.MemoryRequest = q.Value()
		}
	}
	if k.DetachedGrace < 0 || k.DetachedGrace > 24*time.Hour {
		errs = append(errs, fmt.Errorf(p+"detached_grace %s: want 0 to 24h", k.DetachedGrace))
	}
	if k.SweepEvery < 0 || (k.SweepEvery > 0 && k.SweepEvery < time.Second) || k.SweepEvery > 24*time.Hour {
		errs = append(errs, fmt.Errorf(p+"sweep_every %s: want 1s to 24h", k.SweepEvery))
	}
	return cfg, errors.Join(errs...)
}

// validationMessages checks a DNS label (a namespace's, a RuntimeClass's
// name) and says what is wrong with it ("" when nothing).
func validationMessages(s string) string {
	if s == "" {
		return "empty"
	}
	if len(s) > 63 {
		return "longer than 63 characters"
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(s)-1
		if !ok {
			return "want lower-case letters, digits and inner dashes (a DNS label)"
		}
	}
	return ""
}

// rest returns how to reach the API server: the kubeconfig's, or the
// pod's own service account's.
func (k KubeConfig) rest() (*rest.Config, error) {
	if k.Kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("sandboxes.kubernetes: no kubeconfig, and not in a pod: %w", err)
		}
		return c, nil
	}
	if _, err := os.Stat(k.Kubeconfig); err != nil {
		return nil, fmt.Errorf("sandboxes.kubernetes.kubeconfig: %w", err)
	}
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: k.Kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: k.Context},
	).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("sandboxes.kubernetes.kubeconfig %s: %w", k.Kubeconfig, err)
	}
	return c, nil
}

// NewKube returns the kubernetes backend k configures (k resolved and
// valid); it does not contact the API server.
func NewKube(k KubeConfig) (*kube.Backend, error) {
	cfg, err := k.config()
	if err != nil {
		return nil, err
	}
	if cfg.REST, err = k.rest(); err != nil {
		return nil, err
	}
	return kube.New(cfg)
}

// DoctorKube checks the kubernetes backend k configures against its
// cluster (kube.Backend.Doctor), as linux checks: airlock doctor's
// report when serve's configuration names the kubernetes backend.
func DoctorKube(ctx context.Context, k KubeConfig) []linux.Check {
	b, err := NewKube(k)
	if err != nil {
		return []linux.Check{{Layer: "kubernetes", Required: true, Detail: strings.ReplaceAll(err.Error(), "\n", "; ")}}
	}
	out := []linux.Check{{Layer: "kubernetes", OK: true, Required: true, Detail: fmt.Sprintf("namespace %s, image %s, executor %s", k.Namespace, k.Image, k.ExecutorImage)}}
	for _, f := range b.Doctor(ctx) {
		out = append(out, linux.Check{Layer: f.Name, OK: f.OK, Required: f.Required, Detail: f.Detail})
	}
	return out
}

// startKube makes the service's sandboxes pods of the configured cluster,
// and sweeps, every sweep_every, the pods of sandboxes that ended with no
// replica connected (any replica may: a running pod is never touched).
func (s *service) startKube(ctx context.Context) error {
	k := s.cfg.Sandboxes.Kubernetes
	b, err := NewKube(k)
	if err != nil {
		return err
	}
	s.h.cluster = b
	s.log.Info("sandboxes are kubernetes pods", "namespace", k.Namespace, "image", k.Image, "detached_grace", k.DetachedGrace.String())
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(k.SweepEvery)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			n, err := b.Sweep(sctx)
			switch {
			case err != nil && sctx.Err() == nil:
				s.log.Warn("sweep ended sandboxes' pods", "err", err)
			case n > 0:
				s.log.Info("swept ended sandboxes' pods", "pods", n)
			}
		}
	}()
	s.closers = append(s.closers, func() {
		cancel()
		<-done
	})
	return nil
}

// Check is one line of airlock doctor's report.
type Check = linux.Check
