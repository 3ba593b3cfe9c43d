package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// Config configures the backend.
type Config struct {
	// REST is how the backend reaches the API server (a kubeconfig's
	// rest.Config). Required.
	REST *rest.Config
	// Namespace holds the sandboxes' pods; it must have a ServiceAccount
	// named "default" (pods name none, and mount no token). Required.
	Namespace string
	// Image is the sandbox's root: the image its commands see. It needs
	// no shell, only the files the commands use. Required.
	Image string
	// ExecutorImage holds airlock-exec at /airlock-exec: an init
	// container copies it into a volume the sandbox's container runs it
	// from, so Image needs nothing of airlock. Required.
	ExecutorImage string
	// PullPolicy is both images' (empty: the cluster's default).
	PullPolicy corev1.PullPolicy
	// NodeName, when set, binds every pod to that node (no scheduler
	// needed); empty leaves the choice to the scheduler.
	NodeName string
	// RuntimeClasses maps a Spec.Runtime to a RuntimeClass name; a
	// runtime missing here runs without a RuntimeClass (the node's
	// default handler) for RuntimeNative and "", and is refused otherwise.
	RuntimeClasses map[string]string
	// SeccompProfile is the pods' Localhost seccomp profile, relative to
	// the kubelet's seccomp directory; empty means RuntimeDefault. The
	// executor creates a user namespace, which containerd's and Docker's
	// default profiles refuse to a process without CAP_SYS_ADMIN:
	// docs/kubernetes.md has a profile that allows it.
	SeccompProfile string
	// CPURequest (millicores) and MemoryRequest (bytes) are what each
	// sandbox's containers request of a node; 0 means 10m and 64 MiB.
	// The spec's CPUs and memory are the limits. A request above the
	// limit is lowered to it.
	CPURequest    int64
	MemoryRequest int64
	// UID is the uid (and gid) the pod runs as; 0 means 65532. It is the
	// sandbox's only id: its root inside.
	UID int64
	// NoNetworkPolicy stops the backend from emitting a NetworkPolicy per
	// sandbox (no ingress, no egress: nothing of the sandbox's goes over
	// the pod network). The sandbox's isolation does not rest on it (the
	// executor's own network namespace has loopback alone, and egress
	// leaves over the executor's connection to the host); it is defence in
	// depth on clusters whose CNI enforces NetworkPolicy, and costs one
	// API call per create and the RBAC to make and delete policies.
	NoNetworkPolicy bool
	// DetachedGrace is how long a sandbox outlives the last host
	// connected to it (the executor's relay ends it then): 0 ends it with
	// its creator's connection. With several airlock replicas, any of
	// which may attach to a sandbox another made (Attach), it is how long
	// a sandbox whose replica died waits for another: docs/kubernetes.md,
	// "Many replicas".
	DetachedGrace time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Backend creates sandboxes as pods.
type Backend struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a backend. It does not contact the API server.
func New(cfg Config) (*Backend, error) {
	var errs []error
	if cfg.REST == nil {
		errs = append(errs, errors.New("kubernetes backend: no API server configuration"))
	}
	if cfg.Namespace == "" {
		errs = append(errs, errors.New("kubernetes backend: no namespace"))
	}
	if cfg.Image == "" {
		errs = append(errs, errors.New("kubernetes backend: no sandbox image"))
	}
	if cfg.ExecutorImage == "" {
		errs = append(errs, errors.New("kubernetes backend: no executor image"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.UID == 0 {
		cfg.UID = 65532
	}
	if cfg.REST.QPS == 0 && cfg.REST.RateLimiter == nil {
		// client-go's default, 5 requests a second (burst 10), makes
		// the backend wait on itself: a create is a pod, a watch, a
		// NetworkPolicy and an exec, and a warm pool or a conformance
		// run makes many at once (throttled by seconds each, measured
		// on the test cluster). The API server's own priority and
		// fairness is the limit that matters.
		rc := rest.CopyConfig(cfg.REST)
		rc.QPS, rc.Burst = restQPS, restBurst
		cfg.REST = rc
	}
	client, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{cfg: cfg, client: client, log: log}, nil
}

// checkSpec refuses what a pod cannot give yet: it fails closed rather than
// run a sandbox that differs from its spec.
func (b *Backend) checkSpec(spec *sandbox.Spec) error {
	var errs []error
	if spec.RootFS != "" || len(spec.Layers) > 0 {
		errs = append(errs, errors.New("kubernetes backend: the root is the configured image; a host root or image layers cannot reach a pod"))
	}
	if spec.Workspace != "" {
		errs = append(errs, errors.New("kubernetes backend: a host workspace directory cannot reach a pod (the workspace starts empty)"))
	}
	if len(spec.Mounts) > 0 {
		errs = append(errs, errors.New("kubernetes backend: host mounts cannot reach a pod"))
	}
	if spec.WritableRoot || len(spec.RootCaps) > 0 {
		errs = append(errs, errors.New("kubernetes backend: a writable root is not supported (image builds run on the linux backend)"))
	}
	switch spec.User {
	case "", "root", "0":
	default:
		errs = append(errs, fmt.Errorf("kubernetes backend: user %q: a pod's sandbox has one id, root (the pod's uid, without capabilities)", spec.User))
	}
	if spec.Runtime != "" && spec.Runtime != sandbox.RuntimeNative && b.cfg.RuntimeClasses[spec.Runtime] == "" {
		errs = append(errs, fmt.Errorf("kubernetes backend: runtime %q has no RuntimeClass configured", spec.Runtime))
	}
	return errors.Join(errs...)
}

// labelSandbox labels every pod of the backend with its sandbox id.
const labelSandbox = "airlock.run/sandbox"

// restQPS and restBurst bound the backend's requests to the API server
// when Config.REST sets no limit of its own (client-go's default is 5 a
// second, burst 10).
const (
	restQPS   = 50
	restBurst = 100
)

// Paths in the sandbox's container.
const (
	executorDir  = "/.airlock"
	executorPath = executorDir + "/airlock-exec"
)

// Pod returns the pod of a sandbox of spec named id (spec checked).
func (b *Backend) Pod(id string, spec *sandbox.Spec) *corev1.Pod {
	disk := spec.Limits.DiskBytes
	if disk == 0 {
		disk = sandbox.DefaultLimits.DiskBytes
	}
	no, yes := false, true
	uid := b.cfg.UID
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if p := b.cfg.SeccompProfile; p != "" {
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		RunAsNonRoot:             &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	scratch := func(name string, size int64, medium corev1.StorageMedium) corev1.Volume {
		q := resource.NewQuantity(size, resource.BinarySI)
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: q}}}
	}
	res := b.resources(spec)
	mounts := []corev1.VolumeMount{
		{Name: "executor", MountPath: executorDir, ReadOnly: true},
		{Name: "workspace", MountPath: "/workspace"},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "home", MountPath: "/home"},
		{Name: "root", MountPath: "/root"},
		{Name: "run", MountPath: "/run/airlock"},
	}
	volumes := []corev1.Volume{
		scratch("executor", 256<<20, ""),
		scratch("workspace", disk, ""),
		scratch("tmp", disk, ""),
		scratch("home", disk, ""),
		scratch("root", disk, ""),
		scratch("run", 1<<20, corev1.StorageMediumMemory),
	}
	if len(spec.TrustedCAs) > 0 {
		// The trust store the host writes once the executor is up
		// (writeTrustStore): the image's root is read-only.
		mounts = append(mounts, corev1.VolumeMount{Name: "trust", MountPath: trustDir})
		volumes = append(volumes, scratch("trust", 4<<20, corev1.StorageMediumMemory))
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      id,
			Namespace: b.cfg.Namespace,
			Labels:    map[string]string{labelSandbox: id, "app.kubernetes.io/managed-by": "airlock"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeName:      b.cfg.NodeName,
			// The sandbox has no business with the cluster's API.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid, RunAsNonRoot: &yes,
				SeccompProfile: seccomp,
			},
			InitContainers: []corev1.Container{{
				Name:            "executor",
				Image:           b.cfg.ExecutorImage,
				ImagePullPolicy: b.cfg.PullPolicy,
				Command:         []string{"/airlock-exec", "pod-install", executorPath},
				VolumeMounts:    []corev1.VolumeMount{{Name: "executor", MountPath: executorDir}},
				SecurityContext: restricted,
				Resources:       res,
			}},
			Containers: []corev1.Container{{
				Name:            "sandbox",
				Image:           b.cfg.Image,
				ImagePullPolicy: b.cfg.PullPolicy,
				Command:         b.podCommand(),
				VolumeMounts:    mounts,
				SecurityContext: restricted,
				Resources:       res,
			}},
			Volumes: volumes,
		},
	}
	if rc := b.cfg.RuntimeClasses[spec.Runtime]; rc != "" {
		pod.Spec.RuntimeClassName = &rc
	}
	var grace int64 = 1
	pod.Spec.TerminationGracePeriodSeconds = &grace
	return pod
}

// podCommand is the sandbox container's command: the executor's relay.
func (b *Backend) podCommand() []string {
	cmd := []string{executorPath, "pod"}
	if g := b.cfg.DetachedGrace; g > 0 {
		cmd = append(cmd, "--detached-grace="+g.String())
	}
	return cmd
}

// Default requests of a sandbox's containers (Config.CPURequest,
// Config.MemoryRequest).
const (
	defaultCPURequestMilli = 10
	defaultMemoryRequest   = 64 << 20
)

// resources are the requests and limits of a pod's containers for spec.
// The limits are the spec's. The requests are what the scheduler reserves
// on a node: a sandbox idles most of its life, so they are the configured
// small amounts (never above the limits), not the limits, or a node would
// hold only as many sandboxes as it has cores (a 2-core node: two, the
// third OutOfcpu).
func (b *Backend) resources(spec *sandbox.Spec) corev1.ResourceRequirements {
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	cpuReq, memReq := b.cfg.CPURequest, b.cfg.MemoryRequest
	if cpuReq == 0 {
		cpuReq = defaultCPURequestMilli
	}
	if memReq == 0 {
		memReq = defaultMemoryRequest
	}
	if m := spec.Limits.MemoryBytes; m > 0 {
		res.Limits[corev1.ResourceMemory] = *resource.NewQuantity(m, resource.BinarySI)
		memReq = min(memReq, m)
	}
	res.Requests[corev1.ResourceMemory] = *resource.NewQuantity(memReq, resource.BinarySI)
	if c := spec.Limits.CPUs; c > 0 {
		milli := int64(c * 1000)
		res.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		cpuReq = min(cpuReq, milli)
	}
	res.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(cpuReq, resource.DecimalSI)
	return res
}

// Create makes a pod for spec, waits until its container runs, connects to
// its executor through the API server and performs the handshake.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := b.checkSpec(&spec); err != nil {
		return nil, err
	}
	id := spec.ID
	if id == "" {
		id = sandbox.NewID()
	}
	if len(spec.TrustedCAs) > 0 {
		spec.Env = trustEnv(spec.Env)
	}
	pods := b.client.CoreV1().Pods(b.cfg.Namespace)
	created := time.Now()
	pod, err := pods.Create(ctx, b.Pod(id, &spec), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: create pod: %w", id, err)
	}
	sb := &Sandbox{b: b, id: id, spec: spec, created: created, done: make(chan struct{})}
	if !b.cfg.NoNetworkPolicy {
		if err := b.createPolicy(ctx, pod); err != nil {
			sb.deletePod()
			return nil, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	if err := sb.start(ctx); err != nil {
		sb.deletePod()
		return nil, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Attach connects to the running sandbox id, which this backend's
// configuration (another replica's, or this process's before a restart)
// made from spec: its pod must run, be airlock's and hold that sandbox.
// The sandbox is as its creator set it up (the executor keeps its setup;
// spec gives the environment, user and directory of its commands, its TTL
// from the pod's creation, and, for a proxied sandbox, this host's egress
// socket for it). Commands other hosts started go on; Destroy ends the
// sandbox for every host, Detach only this host's connection.
func (b *Backend) Attach(ctx context.Context, id string, spec sandbox.Spec) (*Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := b.checkSpec(&spec); err != nil {
		return nil, err
	}
	pod, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach to sandbox %s: %w", id, err)
	}
	if pod.Labels[labelSandbox] != id || pod.Labels["app.kubernetes.io/managed-by"] != "airlock" {
		return nil, fmt.Errorf("attach to sandbox %s: pod %s is not that sandbox's", id, pod.Name)
	}
	if len(spec.TrustedCAs) > 0 {
		spec.Env = trustEnv(spec.Env)
	}
	sb := &Sandbox{b: b, id: id, spec: spec, created: pod.CreationTimestamp.Time, done: make(chan struct{}), attached: true}
	if err := sb.start(ctx); err != nil {
		return nil, fmt.Errorf("attach to sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Sweep deletes the pods (and network policies) of sandboxes that ended
// with no host to delete them: those whose relay ended them after
// Config.DetachedGrace, and those whose host died without a grace. It
// returns how many it deleted. Any replica may run it; a pod still running
// is never touched.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	pods := b.client.CoreV1().Pods(b.cfg.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=airlock," + labelSandbox})
	if err != nil {
		return 0, fmt.Errorf("sweep sandbox pods: %w", err)
	}
	n := 0
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			continue
		}
		(&Sandbox{b: b, id: p.Name}).deletePod()
		n++
	}
	return n, nil
}

// Sandbox is a sandbox in a pod.
type Sandbox struct {
	// Files forwards the file operations, watches, events, disk use and
	// connections to the executor, as every backend's sandbox does. A
	// pod's workspace starts empty (no host directory reaches it), so
	// Diff shows every file as new.
	execconn.Files

	b       *Backend
	id      string
	spec    sandbox.Spec
	created time.Time
	conn    *execconn.Conn
	layers  []string
	// attached is set for a sandbox this host attached to (Attach), not
	// made: its trust store is written already.
	attached bool

	// stopWatch ends the pod watch.
	stopWatch context.CancelFunc
	watching  sync.WaitGroup

	mu   sync.Mutex
	lost error // guarded by mu: why the sandbox is gone, once done is closed
	// done is closed once, under mu, when the sandbox is gone.
	done chan struct{}
}

var (
	_ sandbox.Sandbox      = (*Sandbox)(nil)
	_ sandbox.Connector    = (*Sandbox)(nil)
	_ sandbox.EventSource  = (*Sandbox)(nil)
	_ sandbox.Checkpointer = (*Sandbox)(nil)
	_ sandbox.DiskMeasurer = (*Sandbox)(nil)
	_ sandbox.Importer     = (*Sandbox)(nil)
)

// start waits for the pod's container to run, connects and shakes hands,
// and starts watching the pod.
func (s *Sandbox) start(ctx context.Context) error {
	if err := s.waitRunning(ctx); err != nil {
		return err
	}
	rw, err := s.b.connect(ctx, s.id)
	if err != nil {
		return err
	}
	conn, err := execconn.Dial(ctx, rw, s.b.setup(&s.spec))
	if err != nil {
		rw.Close()
		if cerr := ctx.Err(); cerr != nil {
			// The stream was closed under the read because the
			// context ended: say so, not only "closed pipe".
			return fmt.Errorf("executor handshake: %w (%w)", cerr, err)
		}
		return fmt.Errorf("executor handshake: %w", err)
	}
	s.conn = conn
	s.Files = execconn.Files{Conn: conn, Alive: s.alive, ID: s.id}
	s.layers = append([]string{"kubernetes:pod"}, conn.Ready.Layers...)
	if len(s.spec.TrustedCAs) > 0 && !s.attached {
		if err := s.writeTrustStore(ctx); err != nil {
			conn.Close()
			return err
		}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWatch = cancel
	if s.spec.Network == sandbox.NetworkProxy {
		// The sandbox's connections to its proxy address come over the
		// executor's connection (egress streams) and go to the host's
		// egress socket for it: docs/kubernetes.md, "Egress".
		s.watching.Add(1)
		go func() {
			defer s.watching.Done()
			conn.ServeEgress(wctx, s.id, s.spec.ProxySocket)
		}()
	}
	s.watching.Add(1)
	go s.watch(wctx)
	return nil
}

// setup is the executor's Setup for spec: the container runtime mounted
// everything (as runsc does for gvisor), the one id is root.
func (b *Backend) setup(spec *sandbox.Spec) *execproto.Setup {
	disk := spec.Limits.DiskBytes
	if disk == 0 {
		disk = sandbox.DefaultLimits.DiskBytes
	}
	s := &execproto.Setup{
		Hostname:    "airlock",
		DiskBytes:   disk,
		ShmBytes:    min(disk, 64<<20),
		User:        execproto.User{Name: "root", UID: 0, GID: 0, Home: "/root"},
		Rlimits:     map[string]uint64{"core": 0},
		NoSetGroups: true,
		GVisor:      true,
		Workspace:   execproto.Workspace{Mode: execproto.WorkspaceEmpty},
	}
	if spec.Limits.Pids > 0 {
		s.Rlimits["nproc"] = uint64(spec.Limits.Pids)
	}
	if a := spec.Account; a != (sandbox.Account{}) {
		// The account a client expects (E2B's user in /home/user) is the
		// sandbox's default user: the one id, root, under the account's
		// name and in its home (HOME, USER), as the linux backend's
		// account is; a command that names root still gets /root. The
		// executor makes the home when it is not the workspace.
		name := a.Name
		if name == "" {
			name = "sandbox"
		}
		s.User = execproto.User{Name: name, UID: 0, GID: 0, Home: a.HomeOf()}
		acct := s.User
		s.Account = &acct
		// Root's home stays writable (its emptyDir), as without an
		// account: root is the account's own id here, so keeping /root
		// from the account (a.RootHome false, natively) would keep
		// nothing from anyone.
		s.RootHome = true
		if a.HomeIsWorkspace {
			s.WorkspaceAlias = a.HomeOf()
		}
	}
	if spec.Network == sandbox.NetworkProxy {
		s.ProxyAddr, s.ProxyStreams = proxyAddr, true
	}
	return s
}

// proxyAddr is where the sandbox's commands reach the egress proxy, as on
// the linux backend (linux.ProxyAddr).
const proxyAddr = "127.0.0.1:3128"

// waitRunning waits until the pod's sandbox container runs; a pod that
// fails or a container that ends first is an error.
func (s *Sandbox) waitRunning(ctx context.Context) error {
	pods := s.b.client.CoreV1().Pods(s.b.cfg.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", s.id).String()
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return fmt.Errorf("wait for pod: %w", err)
		}
		if len(list.Items) == 1 {
			if done, err := running(&list.Items[0]); done || err != nil {
				return err
			}
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return fmt.Errorf("wait for pod: %w", err)
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return errors.New("pod deleted while starting")
			case watch.Added, watch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					if done, err := running(p); done || err != nil {
						w.Stop()
						return err
					}
				}
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for pod: %w", err)
		}
	}
}

// running reports whether p's sandbox container runs, or why it never will.
func running(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod %s: %s", strings.ToLower(string(p.Status.Phase)), podReason(p))
	}
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil && badWaiting[w.Reason] {
			return false, fmt.Errorf("pod container %s: %s: %s", c.Name, w.Reason, w.Message)
		}
		if t := c.State.Terminated; t != nil && (c.Name == "sandbox" || t.ExitCode != 0) {
			return false, fmt.Errorf("pod container %s ended: %s (exit %d) %s", c.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "sandbox" && c.State.Running != nil {
			return true, nil
		}
	}
	return false, nil
}

// badWaiting are the reasons of a waiting container that will not start by
// itself.
var badWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

// podReason says in one line why a pod ended.
func podReason(p *corev1.Pod) string {
	parts := []string{}
	if p.Status.Reason != "" {
		parts = append(parts, p.Status.Reason)
	}
	if p.Status.Message != "" {
		parts = append(parts, p.Status.Message)
	}
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("container %s: %s (exit %d)", c.Name, t.Reason, t.ExitCode))
		}
	}
	if len(parts) == 0 {
		return "no reason given"
	}
	return strings.Join(parts, "; ")
}

// connect runs `airlock-exec pod-connect` in the pod's sandbox container
// through the API server and returns its stdin and stdout as one stream.
func (b *Backend) connect(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	req := b.client.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(b.cfg.Namespace).Name(id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: "sandbox",
			Command:   []string{executorPath, "pod-connect"},
			Stdin:     true, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.cfg.REST, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("connect to executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.cfg.REST, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("connect to executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("connect to executor: %w", err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st := &execStream{in: inW, out: outR, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		var stderr strings.Builder
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &limitedWriter{w: &stderr, n: 4096}})
		if err == nil && stderr.Len() > 0 {
			err = errors.New(strings.TrimSpace(stderr.String()))
		}
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	return st, nil
}

// execStream is an exec's stdin and stdout as an io.ReadWriteCloser.
type execStream struct {
	in     *io.PipeWriter
	out    *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (e *execStream) Read(p []byte) (int, error)  { return e.out.Read(p) }
func (e *execStream) Write(p []byte) (int, error) { return e.in.Write(p) }

// Close closes the exec's stdin (pod-connect then ends the relay, and the
// executor its sandbox), stops the stream and waits for it.
func (e *execStream) Close() error {
	e.once.Do(func() {
		e.in.Close()
		e.out.Close()
		e.cancel()
		<-e.done
	})
	return nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// watch ends the sandbox when its pod is deleted or stops running, or its
// executor connection ends.
func (s *Sandbox) watch(ctx context.Context) {
	defer s.watching.Done()
	pods := s.b.client.CoreV1().Pods(s.b.cfg.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", s.id).String()
	events := make(chan error, 1)
	go func() {
		events <- s.watchPod(ctx, pods.Watch, sel)
	}()
	var ttl <-chan time.Time
	if s.spec.TTL > 0 {
		// The host ends the sandbox at its TTL, as the linux backend
		// does, not the kubelet (activeDeadlineSeconds): the sandbox is
		// gone when its owner says so, and its Done is closed then.
		// From the sandbox's creation: an attaching host's timer ends
		// it when its creator's would have.
		t := time.NewTimer(s.spec.TTL - time.Since(s.created))
		defer t.Stop()
		ttl = t.C
	}
	var why error
	expired := false
	select {
	case <-s.conn.Done():
		why = s.conn.Err()
	case why = <-events:
	case <-ttl:
		s.b.log.Info("sandbox ttl reached", "sandbox_id", s.id)
		why, expired = errors.New("its ttl passed"), true
	case <-ctx.Done():
	}
	s.end(why)
	if expired {
		// The connection's end ends the relay, the executor and every
		// command; the pod goes with them.
		_ = s.conn.Close()
		s.deletePod()
	}
}

// watchPod returns why the pod is gone, or nil when ctx ends first.
func (s *Sandbox) watchPod(ctx context.Context, watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), sel string) error {
	for ctx.Err() == nil {
		w, err := watchFn(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return errors.New("its pod was deleted")
			case watch.Added, watch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
					w.Stop()
					return fmt.Errorf("its pod %s", podReason(p))
				}
			}
		}
		w.Stop()
	}
	return nil
}

// end marks the sandbox gone (once) for why.
func (s *Sandbox) end(why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return
	default:
	}
	if why == nil {
		why = errors.New("destroyed")
	}
	s.lost = why
	close(s.done)
}

// deletePod deletes the sandbox's pod with a grace period of one second
// (the relay ends at once anyway when its host's connection is gone). Not
// zero: a pod deleted with no grace is a forced deletion, whose object the
// API server removes before the kubelet has stopped its containers, so
// nothing would tell when the sandbox's processes are gone (waitGone).
func (s *Sandbox) deletePod() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var grace int64 = 1
	err := s.b.client.CoreV1().Pods(s.b.cfg.Namespace).Delete(ctx, s.id, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		s.b.log.Warn("delete sandbox pod", "sandbox_id", s.id, "err", err)
	}
	if !s.b.cfg.NoNetworkPolicy {
		// The policy is the pod's (an owner reference): the cluster's
		// garbage collector deletes it with the pod, and so does this,
		// for clusters (like the tests') that run none.
		err := s.b.client.NetworkingV1().NetworkPolicies(s.b.cfg.Namespace).Delete(ctx, s.id, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			s.b.log.Warn("delete sandbox network policy", "sandbox_id", s.id, "err", err)
		}
	}
}

// waitGone waits until the sandbox's pod no longer exists: the kubelet
// removes a gracefully deleted pod's object only once its containers
// have stopped. It gives up at ctx's end or after 30 s, saying so in the
// log.
func (s *Sandbox) waitGone(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods := s.b.client.CoreV1().Pods(s.b.cfg.Namespace)
	for {
		_, err := pods.Get(ctx, s.id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			s.b.log.Warn("sandbox pod still there after its deletion", "sandbox_id", s.id, "err", ctx.Err())
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
