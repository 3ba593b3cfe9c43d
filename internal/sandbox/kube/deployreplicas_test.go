package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
	"github.com/airlockrun/airlock/internal/testpki"
)

// clusterScript is the test cluster's script, whose forward and unforward
// make a Service's clusterIP lead somewhere, as kube-proxy would.
const clusterScript = "../../../scripts/kube-cluster.sh"

// forward makes ip:port lead to targets (kube-cluster.sh forward) until t
// ends.
func forward(t *testing.T, ip string, port int, targets ...string) {
	t.Helper()
	args := append([]string{"forward", ip, strconv.Itoa(port)}, targets...)
	if out, err := exec.Command(clusterScript, args...).CombinedOutput(); err != nil {
		t.Fatalf("kube-cluster.sh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(clusterScript, "unforward", ip, strconv.Itoa(port)).CombinedOutput(); err != nil {
			t.Errorf("kube-cluster.sh unforward %s %d: %v: %s", ip, port, err, out)
		}
	})
}

// dnatCount is how many connections this machine's own (the nat table's
// OUTPUT chain) its rule for ip led to target.
func dnatCount(t *testing.T, ip, target string) int {
	t.Helper()
	out, err := exec.Command("iptables", "-t", "nat", "-L", "OUTPUT", "-v", "-n", "-x").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -L: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && slices.Contains(f, ip) && strings.HasSuffix(strings.TrimSpace(l), "to:"+target) {
			n, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("iptables -L: %q", l)
			}
			return n
		}
	}
	t.Fatalf("no rule for %s to %s:\n%s", ip, target, out)
	return 0
}

// TestDeployReplicas runs airlock replicas from deploy/kubernetes on the
// test cluster, sharing one PostgreSQL over TLS, as the manifests mean
// them to:
//   - the store: the test's PostgreSQL (pgtest.StartTLS, on 127.0.0.1 of
//     this machine: TCP logins by password, over TLS alone, from the pod
//     network alone) is the clusterIP of a Service postgres (no
//     selector), which the machine rewrites to it as it does 10.96.0.1:443
//     to the API server (kube-cluster.sh forward: a tagged DNAT rule). The
//     Secret airlock-store is the manifests' (sslmode=verify-full,
//     sslrootcert its ca.crt, mounted) with the role's password, the
//     renamed namespace and the test's CA; the server's certificate names
//     postgres.<namespace>.svc, which the replicas resolve through their
//     /etc/hosts (hostAliases: the test cluster has no DNS). The
//     replicas' sessions are TLS (pg_stat_ssl).
//   - the replicas' pods are made from the Deployment's template (the
//     test cluster has no controller manager), restartPolicy Never so that
//     a killed replica stays dead (a Deployment's kubelet would restart
//     it in place, a new process that could take the run over itself).
//   - the Service airlock's clusterIP is spread over the replicas
//     (statistic rules, as kube-proxy's), its three ports.
//
// Then:
//   - a run (scripted model) is created through the Service; one replica,
//     D, drives it;
//   - an E2B sandbox is created through the other, S (its owner); its
//     session's data-plane requests go through the Service, each a
//     connection of its own: both replicas serve at least a fifth of them
//     (D relays to S), every answer right;
//   - in the run's second step, D's airlock is SIGKILLed by its PID on
//     this machine (its container's containerd task); S's worker takes the
//     run over once D's lease lapses and completes it in a new sandbox pod,
//     from the last checkpoint; S still lists the E2B sandbox, runs a
//     command in it and kills it;
//   - a rolling update's stop: a third replica N starts; a second run is
//     created, and whichever of S and N drives it is SIGTERMed by its PID
//     in the run's second step: it drains (/readyz 503), finishes the step,
//     hands the run back and exits 0; the other resumes it at once and
//     completes it, no step started twice.
//
// Nothing is lost: each run's log verifies (hash chain) and names its
// drives; the run and the sandbox are in the survivors' lists.
func TestDeployReplicas(t *testing.T) {
	e := needCluster(t)
	image := airlockImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	core := e.client.CoreV1()

	d := applyDeploy(t, ctx, e, image, "", func(serve map[string]any) {
		serve["worker_poll"] = "200ms"
	})
	// The Service postgres: a clusterIP the API server allocates, no
	// selector (its endpoint is outside the cluster), led to the test's
	// PostgreSQL, which presents a certificate for the Service's name.
	svc, err := core.Services(d.system).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "postgres"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pgIP, pgName := svc.Spec.ClusterIP, "postgres."+d.system+".svc"
	ca, err := testpki.New("airlock kube test store CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.ServerPEM(pgName, pgName+".cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgtest.OnFreePort(func(port int) (*pgtest.Server, error) {
		return pgtest.StartTLS(ctx, port, []string{"10.244.0.0/24"}, cert, key)
	})
	pgtest.ForTest(t, pg, err)
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	password := hex.EncodeToString(pw[:])
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, q := range []string{"CREATE ROLE airlock LOGIN PASSWORD '" + password + "'", "CREATE DATABASE airlock OWNER airlock"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", strings.Fields(q)[0], err)
		}
	}
	forward(t, pgIP, 5432, "127.0.0.1:"+strconv.Itoa(pg.Port()))
	// The manifests' store URL, its password and namespace the test's.
	sec, err := core.Secrets(d.system).Get(ctx, "airlock-store", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dsn, err := url.Parse(string(sec.Data["url"]))
	if err != nil {
		t.Fatalf("the manifests' store URL: %v", err)
	}
	if dsn.Host != "postgres.airlock-system.svc:5432" || dsn.Query().Get("sslmode") != "verify-full" || dsn.Query().Get("sslrootcert") == "" {
		t.Fatalf("the manifests' store URL %s: want postgres.airlock-system.svc:5432, verify-full and an sslrootcert", dsn.Redacted())
	}
	dsn.User, dsn.Host = url.UserPassword("airlock", password), net.JoinHostPort(pgName, "5432")
	sec.Data["url"], sec.Data["ca.crt"] = []byte(dsn.String()), ca.PEM
	if _, err := core.Secrets(d.system).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.podEdit = func(p *corev1.Pod) {
		// The cluster's DNS would resolve the Service's name; the test
		// cluster has none.
		p.Spec.HostAliases = []corev1.HostAlias{{IP: pgIP, Hostnames: []string{pgName}}}
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
	}

	t0 := time.Now()
	names := []string{"airlock-0", "airlock-1"}
	for _, n := range names {
		d.startReplica(t, ctx, e, n)
	}
	ips := map[string]string{}
	for _, n := range names {
		ips[n] = d.waitReady(t, ctx, e, n).Status.PodIP
	}
	t.Logf("replicas Ready at %v after %s", ips, time.Since(t0).Round(time.Millisecond))
	// Every session of the replicas' role is over TLS.
	var sessions, tlsSessions int
	if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid WHERE a.usename = 'airlock'`).Scan(&sessions, &tlsSessions); err != nil {
		t.Fatal(err)
	}
	if sessions == 0 || tlsSessions != sessions {
		t.Fatalf("the replicas' sessions: %d, %d of them TLS; want some, all TLS", sessions, tlsSessions)
	}
	t.Logf("the replicas hold %d sessions, all TLS", sessions)

	// The Service airlock: its ports spread over the replicas given.
	asvc := d.services["airlock"]
	if asvc == nil || asvc.Spec.ClusterIP == "" {
		t.Fatalf("no Service airlock with a clusterIP: %+v", asvc)
	}
	svcIP := asvc.Spec.ClusterIP
	endpoints := func(replicas ...string) {
		t.Helper()
		for _, port := range []int{8080, 3000, 49983} {
			var targets []string
			for _, n := range replicas {
				targets = append(targets, net.JoinHostPort(ips[n], strconv.Itoa(port)))
			}
			sport := port
			if port == 8080 {
				sport = 80
			}
			forward(t, svcIP, sport, targets...)
		}
	}
	endpoints(names...)
	serviceAPI := "http://" + net.JoinHostPort(svcIP, "80")
	// Spread: 20 connections of their own to /readyz through the Service
	// reach both (the DNAT rules' counters; each gets a connection with
	// probability 1 - 2^-19).
	for range 20 {
		if code, b := httpDo(t, ctx, "GET", serviceAPI+"/readyz", nil, nil); code != http.StatusOK {
			t.Fatalf("/readyz through the Service = %d %s", code, b)
		}
	}
	for _, n := range names {
		if c := dnatCount(t, svcIP, net.JoinHostPort(ips[n], "8080")); c == 0 {
			t.Errorf("no connection to the Service reached %s", n)
		} else {
			t.Logf("%d of 20 connections to the Service reached %s", c, n)
		}
	}

	// The keys, made in the shared store by one replica's own CLI.
	if out, err := execIn(ctx, e, d.system, names[0], "/usr/local/bin/airlock", "tenants", "create", "acme"); err != nil {
		t.Fatalf("tenants create: %v: %s", err, out)
	}
	out, err := execIn(ctx, e, d.system, names[0], "/usr/local/bin/airlock", "keys", "create", "--tenant", "acme", "--name", "sdk", "--scope", "sandboxes", "--e2b")
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, out)
	}
	e2bKey := strings.TrimSpace(out)
	out, err = execIn(ctx, e, d.system, names[1], "/usr/local/bin/airlock", "keys", "create", "--tenant", "acme", "--name", "runs")
	if err != nil {
		t.Fatalf("keys create: %v: %s", err, out)
	}
	runKey := map[string]string{"Authorization": "Bearer " + strings.TrimSpace(out), "Content-Type": "application/json"}
	st, err := postgres.Open(ctx, pg.URL("airlock"), postgres.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &replicaRuns{t: t, ctx: ctx, st: st, api: serviceAPI, key: runKey}

	// A run, through the Service; the replica whose worker claims it
	// drives it.
	run := r.create("a run across replicas", "sleep 20")
	driver := r.startedBy(run, names)
	survivor := names[0]
	if driver == survivor {
		survivor = names[1]
	}
	t.Logf("the run %s is driven by %s", run, driver)
	sAPI := "http://" + net.JoinHostPort(ips[survivor], "8080")

	// An E2B sandbox made through the survivor (its owner), its session's
	// data plane through the Service.
	hd := map[string]string{"X-API-KEY": e2bKey, "Content-Type": "application/json"}
	sE2B := "http://" + net.JoinHostPort(ips[survivor], "3000")
	code, b := httpDo(t, ctx, "POST", sE2B+"/sandboxes", hd, []byte(`{"templateID":"base"}`))
	var sb struct {
		ID    string `json:"sandboxID"`
		Token string `json:"envdAccessToken"`
	}
	if code != http.StatusCreated || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create a sandbox through %s = %d %s", survivor, code, b)
	}
	sessionSpread(t, ctx, svcIP, ips, names, sb.ID, sb.Token)
	sData := "http://" + net.JoinHostPort(ips[survivor], "49983")

	// The driver dies in the run's second step (its sleep): SIGKILL, by
	// its PID.
	runPods := r.inSecondStep(run)
	pid := replicaPID(t, ctx, e, d.system, driver)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s): %v", pid, driver, err)
	}
	killed := time.Now()
	// The Service's endpoints lose the dead replica (what the endpoint
	// controller and kube-proxy would do once its readiness fails).
	endpoints(survivor)
	if term := waitTerminated(t, ctx, e, d.system, driver); term.ExitCode != 128+int32(syscall.SIGKILL) {
		t.Fatalf("%s's airlock (pid %d) ended %+v; want killed by SIGKILL (137)", driver, pid, term)
	}
	if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(ips[driver], "8080")); err == nil {
		c.Close()
		t.Fatalf("%s still answers after its SIGKILL", driver)
	}
	t.Logf("%s's airlock (pid %d) SIGKILLed; its container ended %s after", driver, pid, time.Since(killed).Round(time.Millisecond))

	// The sandbox's record and owner are the survivor's: listed, usable.
	code, b = httpDo(t, ctx, "GET", sE2B+"/sandboxes", hd, nil)
	if code != http.StatusOK || !strings.Contains(string(b), sb.ID) {
		t.Fatalf("list through %s after %s died = %d %s; want %s", survivor, driver, code, b, sb.ID)
	}
	if code, out := envdRun(t, ctx, sData, sb.ID, sb.Token, "cat /tmp/f-0"); code != http.StatusOK || out != "0\n" {
		t.Fatalf("a command through %s after %s died = %d %q", survivor, driver, code, out)
	}

	// The survivor completes the run.
	if status := r.wait(run); status != "completed" {
		t.Fatalf("the run is %s after %s died: %v\n%s", status, driver, types(r.events(run)), podLogs(ctx, e, d.system, survivor))
	}
	t.Logf("the run %s completed %s after %s's SIGKILL", run, time.Since(killed).Round(time.Millisecond), driver)
	evs := r.verify(run)
	started, resumed := drives(t, evs)
	if !slices.Equal(started, []string{driver}) || len(resumed) != 1 || resumed[0] != survivor {
		t.Errorf("drives: started by %v, resumed by %v; want %s, then %s", started, resumed, driver, survivor)
	}
	provisioned := provisions(t, evs)
	if len(provisioned) != 2 || provisioned[0].SandboxID == provisioned[1].SandboxID ||
		provisioned[0].Backend != "kubernetes" || provisioned[1].Backend != "kubernetes" || !slices.Contains(runPods, provisioned[0].SandboxID) {
		t.Errorf("sandbox.provisioned %+v; want the driver's pod (one of %v), then another, both kubernetes", provisioned, runPods)
	}
	code, b = httpDo(t, ctx, "GET", sAPI+"/v1/runs", runKey, nil)
	if code != http.StatusOK || !strings.Contains(string(b), run) {
		t.Errorf("the runs through %s = %d %s; want %s", survivor, code, b, run)
	}
	// The sandbox, killed through its owner: its pod goes, as the
	// survivor's run pod went with the run. The driver's run pod is left,
	// orphaned, until its detached grace (the manifests' 5m) ends it and a
	// sweep deletes it: the test's cleanup deletes it first.
	if code, b := httpDo(t, ctx, "DELETE", sE2B+"/sandboxes/"+sb.ID, hd, nil); code != http.StatusNoContent {
		t.Fatalf("kill the sandbox = %d %s", code, b)
	}
	orphan := []string{provisioned[0].SandboxID}
	waitPods(t, ctx, e, d.sandboxes, orphan)

	// A rolling update's stop: a new replica, then SIGTERM to whichever
	// replica drives a run, inside its second step.
	names = []string{survivor, "airlock-2"}
	d.startReplica(t, ctx, e, names[1])
	ips[names[1]] = d.waitReady(t, ctx, e, names[1]).Status.PodIP
	endpoints(names...)
	run = r.create("a run across a rollout", "sleep 8")
	driver = r.startedBy(run, names)
	other := names[0]
	if driver == other {
		other = names[1]
	}
	t.Logf("the run %s is driven by %s", run, driver)
	r.inSecondStep(run)
	pid = replicaPID(t, ctx, e, d.system, driver)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("kill -TERM %d (%s): %v", pid, driver, err)
	}
	termed := time.Now()
	// Draining: its readiness fails at once, and the Service's endpoints
	// lose it.
	for {
		code, _ := httpDo(t, ctx, "GET", "http://"+net.JoinHostPort(ips[driver], "8080")+"/readyz", nil, nil)
		if code == http.StatusServiceUnavailable {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s's /readyz is %d after its SIGTERM", driver, code)
		case <-time.After(20 * time.Millisecond):
		}
	}
	endpoints(other)
	if term := waitTerminated(t, ctx, e, d.system, driver); term.ExitCode != 0 {
		t.Fatalf("%s's airlock (pid %d) ended %+v after its SIGTERM; want exit 0\n%s", driver, pid, term, podLogs(ctx, e, d.system, driver))
	}
	t.Logf("%s's airlock (pid %d) exited 0 %s after its SIGTERM", driver, pid, time.Since(termed).Round(time.Millisecond))
	if status := r.wait(run); status != "completed" {
		t.Fatalf("the run is %s after %s stopped: %v\n%s", status, driver, types(r.events(run)), podLogs(ctx, e, d.system, other))
	}
	t.Logf("the run %s completed %s after %s's SIGTERM", run, time.Since(termed).Round(time.Millisecond), driver)
	evs = r.verify(run)
	started, resumed = drives(t, evs)
	if !slices.Equal(started, []string{driver}) || !slices.Equal(resumed, []string{other}) {
		t.Errorf("drives: started by %v, resumed by %v; want %s, then %s", started, resumed, driver, other)
	}
	onceEach(t, evs)
	// The stopped replica destroyed its run pod as it handed the run back;
	// the other's went with the run: the first kill's orphan alone is left.
	waitPods(t, ctx, e, d.sandboxes, orphan)
	t.Logf("done after %s", time.Since(t0).Round(time.Millisecond))
}

// sessionSpread sends an E2B session's data-plane requests for sandbox id
// through the Service at svcIP, each a connection of its own: commands
// writing files, uploads, and downloads of both, each answer checked. Its
// rules send each connection to either replica of names with probability
// 1/2, independently (the statistic match), so of n = 60 connections each
// replica gets fewer than 12 (a fifth) with probability
// P(X <= 11), X ~ Binomial(60, 1/2), = 3.8e-7, and either does with
// 7.6e-7: the bound fails once in 1.3 million runs of a working spread,
// and always when the Service reaches one replica alone.
func sessionSpread(t *testing.T, ctx context.Context, svcIP string, ips map[string]string, names []string, id, token string) {
	t.Helper()
	const n, least = 60, 12
	data := "http://" + net.JoinHostPort(svcIP, "49983")
	envd := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}
	up := map[string]string{"Content-Type": "application/octet-stream"}
	for k, v := range envd {
		up[k] = v
	}
	before := map[string]int{}
	for _, name := range names {
		before[name] = dnatCount(t, svcIP, net.JoinHostPort(ips[name], "49983"))
	}
	for i := 0; i < n; i += 3 {
		f := "/tmp/f-" + strconv.Itoa(i)
		if code, out := envdRun(t, ctx, data, id, token, fmt.Sprintf("echo %d > %s; cat %s", i, f, f)); code != http.StatusOK || out != fmt.Sprintf("%d\n", i) {
			t.Fatalf("command %d through the Service = %d %q", i, code, out)
		}
		u, content := "/tmp/u-"+strconv.Itoa(i), fmt.Sprintf("uploaded %d\n", i)
		if code, b := httpDo(t, ctx, "POST", data+"/files?path="+u, up, []byte(content)); code != http.StatusOK {
			t.Fatalf("upload %d through the Service = %d %s", i+1, code, b)
		}
		// The command's file and the upload, in turn.
		want, path := fmt.Sprintf("%d\n", i), f
		if i%2 == 1 {
			want, path = content, u
		}
		if code, b := httpDo(t, ctx, "GET", data+"/files?path="+path, envd, nil); code != http.StatusOK || string(b) != want {
			t.Fatalf("download %d (%s) through the Service = %d %q; want %q", i+2, path, code, b, want)
		}
	}
	total := 0
	got := map[string]int{}
	for _, name := range names {
		got[name] = dnatCount(t, svcIP, net.JoinHostPort(ips[name], "49983")) - before[name]
		total += got[name]
	}
	if total != n {
		t.Fatalf("the Service's rules counted %d connections (%v); want the session's %d", total, got, n)
	}
	for _, name := range names {
		if got[name] < least {
			t.Errorf("%s served %d of the session's %d requests through the Service; want at least %d", name, got[name], n, least)
		}
	}
	t.Logf("the session's %d requests through the Service: %v", n, got)
}

// replicaRuns drives the runs API of a deployment through its Service and
// reads their logs in the shared store.
type replicaRuns struct {
	t   *testing.T
	ctx context.Context
	st  *postgres.Store
	api string
	key map[string]string
}

// create makes a run of three steps (a file, then the command slow
// followed by a second file, then finish, with a verify command of both
// files) through the Service and returns its id.
func (r *replicaRuns) create(task, slow string) string {
	r.t.Helper()
	script := "turns:\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"echo one > one.txt\"}\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"" + slow + "; echo two > two.txt\"}\n" +
		"  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	body, _ := json.Marshal(map[string]any{
		"task": task, "script": script,
		"verify": map[string]any{"commands": []string{"grep -qx one one.txt && grep -qx two two.txt"}},
	})
	code, b := httpDo(r.t, r.ctx, "POST", r.api+"/v1/runs", r.key, body)
	var run struct{ ID string }
	if code != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		r.t.Fatalf("create a run through the Service = %d %s", code, b)
	}
	return run.ID
}

func (r *replicaRuns) events(id string) []event.Event {
	r.t.Helper()
	evs, err := r.st.Events(r.ctx, id, 1, store.MaxPage)
	if err != nil {
		r.t.Fatal(err)
	}
	return evs
}

// until polls run id's log until done says so, failing on a final status
// first or at ctx's end.
func (r *replicaRuns) until(id, what string, done func([]event.Event) bool) {
	r.t.Helper()
	for {
		evs := r.events(id)
		if done(evs) {
			return
		}
		if countEvents(evs, event.TypeRunCompleted)+countEvents(evs, event.TypeRunFailed)+countEvents(evs, event.TypeRunCancelled) > 0 {
			r.t.Fatalf("the run %s ended before %s: %v", id, what, types(evs))
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("the run %s: no %s: %v", id, what, types(evs))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startedBy waits for run id to start and returns the replica of names
// that drives it (run.started's host: the pod's hostname, its name).
func (r *replicaRuns) startedBy(id string, names []string) string {
	r.t.Helper()
	r.until(id, "start", func(evs []event.Event) bool { return countEvents(evs, event.TypeRunStarted) > 0 })
	started, _ := drives(r.t, r.events(id))
	if len(started) != 1 || !slices.Contains(names, started[0]) {
		r.t.Fatalf("run.started names hosts %v, not one of %v", started, names)
	}
	return started[0]
}

// inSecondStep waits until run id is a second into its second step's
// command and returns the sandbox pods provisioned so far.
func (r *replicaRuns) inSecondStep(id string) []string {
	r.t.Helper()
	r.until(id, "second step", func(evs []event.Event) bool { return countEvents(evs, event.TypeToolStarted) >= 2 })
	time.Sleep(time.Second) // inside its command
	var pods []string
	for _, p := range provisions(r.t, r.events(id)) {
		pods = append(pods, p.SandboxID)
	}
	return pods
}

// wait waits for run id's final status through the Service.
func (r *replicaRuns) wait(id string) string {
	r.t.Helper()
	for {
		code, b := httpDo(r.t, r.ctx, "GET", r.api+"/v1/runs/"+id, r.key, nil)
		var run struct{ Status string }
		if code != http.StatusOK || json.Unmarshal(b, &run) != nil {
			r.t.Fatalf("GET the run through the Service = %d %s", code, b)
		}
		if event.Status(run.Status).Final() {
			return run.Status
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("the run %s is still %s: %v", id, run.Status, types(r.events(id)))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// verify checks run id's hash chain and returns its log.
func (r *replicaRuns) verify(id string) []event.Event {
	r.t.Helper()
	if _, err := store.VerifyRun(r.ctx, r.st, id); err != nil {
		r.t.Fatalf("VerifyRun(%s) = %v", id, err)
	}
	return r.events(id)
}

// drives returns the replicas (hosts' names, without the pid) that
// started and resumed a run, in order.
func drives(t *testing.T, evs []event.Event) (started, resumed []string) {
	t.Helper()
	for _, ev := range evs {
		var host string
		switch ev.Type {
		case event.TypeRunStarted:
			var p event.RunStarted
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			host, _, _ = strings.Cut(p.Host, ":")
			started = append(started, host)
		case event.TypeRunResumed:
			var p event.RunResumed
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			host, _, _ = strings.Cut(p.Host, ":")
			resumed = append(resumed, host)
		}
	}
	return started, resumed
}

func provisions(t *testing.T, evs []event.Event) []event.SandboxProvisioned {
	t.Helper()
	var ps []event.SandboxProvisioned
	for _, ev := range evs {
		if ev.Type == event.TypeSandboxProvisioned {
			var p event.SandboxProvisioned
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
	}
	return ps
}

// onceEach checks that every tool call of the log started once and
// finished once, with no uncertain call and no retry: no step was redone.
func onceEach(t *testing.T, evs []event.Event) {
	t.Helper()
	started, finished := map[string]int{}, map[string]int{}
	for _, ev := range evs {
		var c struct {
			Step   int    `json:"step"`
			CallID string `json:"call_id"`
		}
		switch ev.Type {
		case event.TypeToolStarted, event.TypeToolFinished:
			if err := json.Unmarshal(ev.Payload, &c); err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("%d/%s", c.Step, c.CallID)
			if ev.Type == event.TypeToolStarted {
				started[k]++
			} else {
				finished[k]++
			}
		case event.TypeToolUncertain, event.TypeRetry:
			t.Errorf("the log has a %s: %s", ev.Type, ev.Payload)
		}
	}
	for k, n := range started {
		if n != 1 || finished[k] != 1 {
			t.Errorf("call %s started %d times, finished %d; want once each", k, n, finished[k])
		}
	}
	if len(started) < 2 || len(finished) != len(started) {
		t.Errorf("calls started %v, finished %v", started, finished)
	}
}

// replicaPID is the PID on this machine of replica name's airlock: its
// container's task in the node's containerd (ctr tasks ls), checked to be
// airlock serve.
func replicaPID(t *testing.T, ctx context.Context, e *env, ns, name string) int {
	t.Helper()
	pod, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		t.Fatalf("%s has no container status", name)
	}
	cid, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if !ok {
		t.Fatalf("%s's container %q is not containerd's", name, pod.Status.ContainerStatuses[0].ContainerID)
	}
	out, err := exec.CommandContext(ctx, "ctr", "-a", os.Getenv("AIRLOCK_KUBE_CONTAINERD"), "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != cid {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil || pid <= 1 {
			t.Fatalf("ctr tasks ls: %q", l)
		}
		argv, err := os.ReadFile("/proc/" + f[1] + "/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		if a := strings.Split(string(argv), "\x00"); len(a) < 2 || a[0] != "/usr/local/bin/airlock" || a[1] != "serve" {
			t.Fatalf("%s's task %d runs %q, not airlock serve", name, pid, a)
		}
		return pid
	}
	t.Fatalf("no task of %s's container %s:\n%s", name, cid, out)
	return 0
}

// waitTerminated waits for pod name's container to have ended (the
// kubelet's report) and returns how.
func waitTerminated(t *testing.T, ctx context.Context, e *env, ns, name string) *corev1.ContainerStateTerminated {
	t.Helper()
	for {
		pod, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := pod.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Terminated != nil {
			return cs[0].State.Terminated
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s's container has not ended: %+v", name, pod.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitPods waits for the pods of namespace ns to be want's (sorted).
func waitPods(t *testing.T, ctx context.Context, e *env, ns string, want []string) {
	t.Helper()
	for {
		left := sandboxPods(t, ctx, e, ns)
		if slices.Equal(left, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pods left in %s: %v; want %v", ns, left, want)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// envdRun runs cmd with /bin/sh -c in sandbox id through the E2B data
// plane at base (process.Process/Start) and returns the status and the
// command's stdout.
func envdRun(t *testing.T, ctx context.Context, base, id, token, cmd string) (int, string) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", cmd}}, "stdin": false})
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	code, body := httpDo(t, ctx, "POST", base+"/process.Process/Start", map[string]string{
		"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983",
		"X-Access-Token": token, "Content-Type": "application/connect+json",
	}, env)
	var stdout strings.Builder
	for _, m := range regexp.MustCompile(`"stdout":"([^"]*)"`).FindAllSubmatch(body, -1) {
		d, _ := base64.StdEncoding.DecodeString(string(m[1]))
		stdout.Write(d)
	}
	return code, stdout.String()
}

// sandboxPods returns the names of the pods in namespace ns.
func sandboxPods(t *testing.T, ctx context.Context, e *env, ns string) []string {
	t.Helper()
	l, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return names
}

func countEvents(evs []event.Event, typ event.Type) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func types(evs []event.Event) []event.Type {
	var ts []event.Type
	for _, ev := range evs {
		ts = append(ts, ev.Type)
	}
	return ts
}
