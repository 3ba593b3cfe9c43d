package kube

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Policy returns the NetworkPolicy of the sandbox whose pod is pod: it
// selects that pod alone and allows nothing in or out. Nothing of the
// sandbox's uses the pod network: the host reaches the executor through
// the API server (exec), and the sandbox's egress leaves over that same
// connection (egress streams), so "deny all but the host" is "deny all".
// The pod owns the policy, so the cluster's garbage collector deletes it
// with the pod.
func (b *Backend) Policy(pod *corev1.Pod) *networkingv1.NetworkPolicy {
	yes := true
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pod.Name,
			Namespace: b.cfg.Namespace,
			Labels:    map[string]string{labelSandbox: pod.Name, "app.kubernetes.io/managed-by": "airlock"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				BlockOwnerDeletion: &yes,
			}},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelSandbox: pod.Name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// createPolicy creates the sandbox's NetworkPolicy (Policy).
func (b *Backend) createPolicy(ctx context.Context, pod *corev1.Pod) error {
	_, err := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, b.Policy(pod), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create network policy: %w", err)
	}
	return nil
}

// trustDir is where a pod's sandbox finds the CAs of Spec.TrustedCAs: a
// memory volume of its own, since the image's root is read-only.
const trustDir = "/etc/airlock"

// Files of trustDir: the extra CAs alone (for tools that add them to their
// own store) and the image's system bundle with them.
const (
	trustCAs    = trustDir + "/ca.pem"
	trustBundle = trustDir + "/bundle.pem"
)

// imageBundles are where images keep their system CA bundle, first found
// first (the linux backend's list).
var imageBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/cert.pem",                  // Alpine, macOS-like layouts
}

// trustEnv adds to env what points tools at the trust store, where env does
// not set it already.
func trustEnv(env []string) []string {
	set := map[string]bool{}
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		set[k] = true
	}
	out := append([]string(nil), env...)
	for _, kv := range [][2]string{
		{"SSL_CERT_FILE", trustBundle},
		{"REQUESTS_CA_BUNDLE", trustBundle},
		{"CURL_CA_BUNDLE", trustBundle},
		{"GIT_SSL_CAINFO", trustBundle},
		{"PIP_CERT", trustBundle},
		{"NODE_EXTRA_CA_CERTS", trustCAs},
	} {
		if !set[kv[0]] {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	return out
}

// writeTrustStore writes the spec's CAs into the sandbox's trust volume:
// alone, and after the image's own system bundle (public roots stay
// trusted: tools reach hosts the proxy only tunnels to as well).
func (s *Sandbox) writeTrustStore(ctx context.Context) error {
	cas := append(bytes.TrimSpace(append([]byte(nil), s.spec.TrustedCAs...)), '\n')
	if err := s.conn.WriteFile(ctx, trustCAs, bytes.NewReader(cas), 0o644); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	bundle := cas
	for _, p := range imageBundles {
		if sys, err := s.conn.ReadFile(ctx, p, maxBundle); err == nil && len(sys) > 0 {
			bundle = append(append(bytes.TrimRight(sys, "\n"), '\n'), cas...)
			break
		}
	}
	if err := s.conn.WriteFile(ctx, trustBundle, bytes.NewReader(bundle), 0o644); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	return nil
}

// maxBundle bounds the image's system bundle read (a Debian bundle is
// about 200 KiB).
const maxBundle = 2 << 20
