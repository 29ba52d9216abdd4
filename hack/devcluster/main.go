// Command devcluster is `make run`: it starts the test harness's control
// plane (a real kube-apiserver + etcd with the Workload API on), installs
// shepherd's CRDs and webhook configurations pointing at a locally served
// `shepherd serve` with generated certificates, starts shepherd, applies
// examples/ (valid and invalid manifests from the design documents), prints
// what was admitted, defaulted and rejected, and waits for Ctrl-C to stop
// everything.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
)

// demoNamespace receives the namespaced examples.
const demoNamespace = "demo"

func main() {
	shepherd := flag.String("shepherd", "bin/shepherd", "The shepherd binary to run.")
	examples := flag.String("examples", "examples", "Directory of example manifests (valid/ and invalid/).")
	state := flag.String("state", "bin/run", "Directory for the kubeconfig, certificates and shepherd's log.")
	exitAfterApply := flag.Bool("exit", false, "Stop after applying the examples instead of waiting for Ctrl-C (for smoke tests).")
	flag.Parse()
	if err := run(*shepherd, *examples, *state, *exitAfterApply); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

func run(shepherdBin, examples, state string, exitAfterApply bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	state, err = filepath.Abs(state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}

	fmt.Println("Starting kube-apiserver " + cluster.K8sVersion + " + etcd " + cluster.EtcdVersion + " (Workload API on) ...")
	c, err := cluster.New(cluster.Options{
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the control plane ...")
		err = errors.Join(err, c.Stop())
	}()

	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := os.WriteFile(kubeconfig, c.Env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", kubeconfig, err)
	}
	wh := c.Env.WebhookInstallOptions
	metricsAddr, healthAddr := cluster.FreeAddr(), cluster.FreeAddr()
	if metricsAddr == "" || healthAddr == "" {
		return errors.New("no free local port for the metrics and health servers")
	}

	logPath := filepath.Join(state, "shepherd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(shepherdBin, "serve",
		"--kubeconfig="+kubeconfig,
		"--webhook-host="+wh.LocalServingHost,
		"--webhook-port="+strconv.Itoa(wh.LocalServingPort),
		"--cert-dir="+wh.LocalServingCertDir,
		// envtest issued the certificate and injected its CA: serve the files.
		"--cert-mode=cert-manager",
		"--metrics-bind-address="+metricsAddr,
		"--metrics-secure=false",
		"--health-probe-bind-address="+healthAddr,
		"--leader-elect=false",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: Ctrl-C reaches this program, which then stops
	// shepherd first and the control plane second, in that order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Printf("Starting %s serve (webhooks on https://%s:%d, log %s) ...\n", shepherdBin, wh.LocalServingHost, wh.LocalServingPort, logPath)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting shepherd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		fmt.Println("Stopping shepherd ...")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	if err := waitReady(ctx, "http://"+healthAddr+"/readyz", exited); err != nil {
		return fmt.Errorf("%w (see %s)", err, logPath)
	}
	fmt.Println("shepherd is ready.")

	if err := applyExamples(ctx, c.Config, examples); err != nil {
		return err
	}

	fmt.Printf(`
shepherd is serving a local control plane. Point kubectl at it:

  export KUBECONFIG=%s
  kubectl get clustertrainingruntimes,trainjobs,podcliquesets,jobsets -A
  kubectl get events -n %s --field-selector reason=PolicyViolation

The audit trail of verdicts (metrics served plain on %s for local use):

  bin/shepherd audit --server http://%s
  curl -s http://%s/metrics | grep shepherd_

shepherd's log: %s
`, kubeconfig, demoNamespace, metricsAddr, metricsAddr, metricsAddr, logPath)
	if exitAfterApply {
		return nil
	}
	fmt.Println("Press Ctrl-C to stop.")
	select {
	case <-ctx.Done():
		fmt.Println()
	case err := <-exited:
		exited <- err
		return fmt.Errorf("shepherd exited: %v (see %s)", err, logPath)
	}
	return nil
}

func waitReady(ctx context.Context, url string, exited chan error) error {
	deadline := time.After(3 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			exited <- err
			return fmt.Errorf("shepherd exited before it was ready: %v", err)
		case <-deadline:
			return errors.New("shepherd was not ready after 3 minutes")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// kindOrder applies what others refer to first: runtimes before TrainJobs,
// PodCliqueSets before their PodCliques.
var kindOrder = map[string]int{"ClusterTrainingRuntime": 0, "TrainingRuntime": 1, "PodCliqueSet": 2, "PodCliqueScalingGroup": 3, "PodClique": 4, "TrainJob": 5, "JobSet": 6}

type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

func applyExamples(ctx context.Context, cfg *rest.Config, dir string) error {
	w := &cluster.Warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: install.NewScheme()})
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", demoNamespace, err)
	}
	for _, set := range []string{"valid", "invalid"} {
		ms, err := readManifests(filepath.Join(dir, set))
		if err != nil {
			return err
		}
		fmt.Printf("\n== examples/%s (%d manifests)\n", set, len(ms))
		for _, m := range ms {
			obj := m.obj
			namespaced, err := c.IsObjectNamespaced(obj)
			if err != nil {
				return fmt.Errorf("%s: %w", m.file, err)
			}
			if namespaced && obj.GetNamespace() == "" {
				obj.SetNamespace(demoNamespace)
			}
			sent := obj.DeepCopy()
			w.Take()
			err = c.Create(ctx, obj)
			report(m.file, sent, obj, err, w.Take())
		}
	}
	return nil
}

func readManifests(dir string) ([]manifest, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []manifest
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				r.Close()
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) > 0 {
				out = append(out, manifest{file: filepath.Base(f), obj: u})
			}
		}
		r.Close()
	}
	sort.SliceStable(out, func(i, j int) bool { return kindOrder[out[i].obj.GetKind()] < kindOrder[out[j].obj.GetKind()] })
	return out, nil
}

func report(file string, sent, got *unstructured.Unstructured, err error, warns []string) {
	name := sent.GetName()
	if sent.GetNamespace() != "" {
		name = sent.GetNamespace() + "/" + name
	}
	what := fmt.Sprintf("%s %s  (%s)", sent.GetKind(), name, file)
	if err != nil {
		fmt.Printf("REJECTED  %s\n", what)
		var se *apierrors.StatusError
		if errors.As(err, &se) && se.ErrStatus.Details != nil && len(se.ErrStatus.Details.Causes) > 0 {
			for _, cause := range se.ErrStatus.Details.Causes {
				fmt.Printf("          - %s: %s\n", cause.Field, cause.Message)
			}
		} else {
			fmt.Printf("          - %v\n", err)
		}
	} else {
		fmt.Printf("ADMITTED  %s\n", what)
		for _, d := range defaulted(sent, got) {
			fmt.Printf("          defaulted %s\n", d)
		}
		for _, k := range knobsRead(got) {
			fmt.Printf("          knob %s\n", k)
		}
	}
	for _, w := range warns {
		fmt.Printf("          warning: %s\n", w)
	}
}

// defaulted lists what admission added or changed in spec and in the
// annotations (where a seed knob's carrier is defaulted): the difference
// between the manifest as sent and the object as stored.
func defaulted(sent, got *unstructured.Unstructured) []string {
	var out []string
	for _, part := range []struct {
		prefix string
		a, b   any
	}{
		{"spec", sent.Object["spec"], got.Object["spec"]},
		{"metadata.annotations", sent.GetAnnotations(), got.GetAnnotations()},
	} {
		a, _ := json.Marshal(part.a)
		b, _ := json.Marshal(part.b)
		if string(a) == "null" {
			a = []byte("{}")
		}
		if string(b) == "null" {
			b = []byte("{}")
		}
		ops, err := jsonpatch.CreatePatch(a, b)
		if err != nil {
			continue
		}
		for _, op := range ops {
			v, _ := json.Marshal(op.Value)
			switch op.Operation {
			case "remove":
				out = append(out, fmt.Sprintf("%s removed", fieldPath(part.prefix, op.Path)))
			default:
				out = append(out, fmt.Sprintf("%s = %s", fieldPath(part.prefix, op.Path), v))
			}
		}
	}
	sort.Strings(out)
	return out
}

// knobsRead lists the seed knobs of an admitted object as shepherd reads
// them (integrations/knob: the seed field, else its carrier annotation),
// and where each was found.
func knobsRead(got *unstructured.Unstructured) []string {
	var out []string
	for _, k := range corpus.KnobsOf(got) {
		if k.Type == knob.Presence {
			if k.Present(got.Object) {
				raw, _ := k.Lookup(got.Object)
				out = append(out, fmt.Sprintf("%s = set (from %s)", k.Name, k.Describe(raw.Form)))
			}
			continue
		}
		raw, ok := k.Lookup(got.Object)
		if !ok {
			continue
		}
		where := k.FieldPath(raw.Form)
		if raw.Form == knob.Annotation {
			where = "annotation " + k.Annotation
		}
		out = append(out, fmt.Sprintf("%s = %v (from %s)", k.Name, raw.Value, where))
	}
	return out
}

// fieldPath turns a JSON pointer under prefix into a field path:
// /template/cliques/0/spec -> spec.template.cliques[0].spec.
func fieldPath(prefix, ptr string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, seg := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if _, err := strconv.Atoi(seg); err == nil {
			b.WriteString("[" + seg + "]")
			continue
		}
		b.WriteString("." + strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~"))
	}
	return b.String()
}
