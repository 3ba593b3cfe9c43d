package kube_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
)

// TestPodShape checks, without a cluster, what the pod carries from the
// spec and the configuration: limits, TTL, RuntimeClass, the seccomp
// profile, and the fields "restricted" asks for on every container.
// TestPodRestricted asks the real admission.
func TestPodShape(t *testing.T) {
	b, err := kube.New(kube.Config{
		REST: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", Image: "img", ExecutorImage: "exe",
		RuntimeClasses: map[string]string{sandbox.RuntimeGVisor: "gvisor"}, SeccompProfile: "airlock.json",
	})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, DiskBytes: 64 << 20}, TTL: 90 * time.Second, Runtime: sandbox.RuntimeGVisor}
	p := b.Pod("sb-x", &spec)
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token")
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %s, want Never", p.Spec.RestartPolicy)
	}
	if rc := p.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("runtimeClassName = %v, want gvisor", rc)
	}
	// The host ends a sandbox at its TTL, as on linux: a deadline of the
	// kubelet's would end the pod before the host sees the TTL pass.
	if d := p.Spec.ActiveDeadlineSeconds; d != nil {
		t.Errorf("activeDeadlineSeconds = %d, want none", *d)
	}
	sc := p.Spec.SecurityContext.SeccompProfile
	if sc == nil || sc.Type != corev1.SeccompProfileTypeLocalhost || sc.LocalhostProfile == nil || *sc.LocalhostProfile != "airlock.json" {
		t.Errorf("seccompProfile = %+v, want Localhost airlock.json", sc)
	}
	if u := p.Spec.SecurityContext.RunAsUser; u == nil || *u == 0 {
		t.Errorf("runAsUser = %v, want a non-root uid (mapping uid 0 needs CAP_SETFCAP)", u)
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		s := c.SecurityContext
		if s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation ||
			s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem ||
			s.Capabilities == nil || len(s.Capabilities.Drop) != 1 || s.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: securityContext = %+v, want no escalation, read-only root, drop ALL", c.Name, s)
		}
	}
	c := p.Spec.Containers[0]
	if m := c.Resources.Limits[corev1.ResourceMemory]; m.Value() != 256<<20 {
		t.Errorf("memory limit = %s, want 256Mi", m.String())
	}
	if cpu := c.Resources.Limits[corev1.ResourceCPU]; cpu.MilliValue() != 500 {
		t.Errorf("cpu limit = %s, want 500m", cpu.String())
	}
	// Requests are small, so that a node holds more sandboxes than it has
	// cores; the limits stay the spec's.
	if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.MilliValue() != 10 {
		t.Errorf("cpu request = %s, want 10m", cpu.String())
	}
	if m := c.Resources.Requests[corev1.ResourceMemory]; m.Value() != 64<<20 {
		t.Errorf("memory request = %s, want 64Mi", m.String())
	}
	small := b.Pod("sb-y", &sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 32 << 20, CPUs: 0.005}})
	sc0 := small.Spec.Containers[0].Resources
	if cpu, m := sc0.Requests[corev1.ResourceCPU], sc0.Requests[corev1.ResourceMemory]; cpu.MilliValue() != 5 || m.Value() != 32<<20 {
		t.Errorf("requests under limits of 5m and 32Mi = %s and %s, want the limits", cpu.String(), m.String())
	}
	for _, v := range p.Spec.Volumes {
		if v.Name == "workspace" && (v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Value() != 64<<20) {
			t.Errorf("workspace volume = %+v, want an emptyDir of 64Mi", v)
		}
	}
}
