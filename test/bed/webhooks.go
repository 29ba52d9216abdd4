package bed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// manifests are an upstream module's webhook configurations as its default
// install renders them: the generated manifests with the kustomize patches
// of its webhook component applied and the name prefix of its default
// overlay.
type manifests struct {
	module string
	// file is the generated manifests, relative to the module's root.
	file string
	// patches are JSON 6902 patch files (relative to the module's root) by
	// the kind they target.
	patches map[string]string
	// prefix is the overlay's namePrefix.
	prefix string
}

var (
	// sigs.k8s.io/jobset config/default: namePrefix jobset-, over
	// config/components/webhook (the pod webhooks' objectSelector).
	jobSetWebhooks = manifests{
		module: "sigs.k8s.io/jobset",
		file:   "config/components/webhook/manifests.yaml",
		patches: map[string]string{
			"MutatingWebhookConfiguration":   "config/components/webhook/patches/mutating-patch.yaml",
			"ValidatingWebhookConfiguration": "config/components/webhook/patches/validating-patch.yaml",
		},
		prefix: "jobset-",
	}
	// github.com/kubeflow/trainer/v2 manifests/base/webhook (names
	// defaulter.trainer.kubeflow.org and validator.trainer.kubeflow.org,
	// the runtimes' validators' objectSelector).
	trainerWebhooks = manifests{
		module: "github.com/kubeflow/trainer/v2",
		file:   "manifests/base/webhook/manifests.yaml",
		patches: map[string]string{
			"MutatingWebhookConfiguration":   "manifests/base/webhook/patch_mutating.yaml",
			"ValidatingWebhookConfiguration": "manifests/base/webhook/patch_validating.yaml",
		},
	}
)

// ModuleDir is the directory of a module at the version go.mod requires, in
// the module cache (downloaded through the proxy if needed).
func ModuleDir(path string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", path)
	cmd.Dir = cluster.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Version, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s %s", path, err, info.Error, stderr.String())
	}
	return info.Dir, nil
}

// read returns the configurations (unstructured, as JSON objects).
func (m manifests) read() ([]*unstructured.Unstructured, error) {
	dir, err := ModuleDir(m.module)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, m.file))
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s %s: %w", m.module, m.file, err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if p, ok := m.patches[u.GetKind()]; ok {
			if u, err = patch(u, filepath.Join(dir, p)); err != nil {
				return nil, fmt.Errorf("%s %s: %w", m.module, p, err)
			}
		}
		u.SetName(m.prefix + u.GetName())
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s %s holds no webhook configuration", m.module, m.file)
	}
	return out, nil
}

func patch(u *unstructured.Unstructured, file string) (*unstructured.Unstructured, error) {
	y, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(j)
	if err != nil {
		return nil, err
	}
	doc, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if doc, err = p.Apply(doc); err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{}
	return out, out.UnmarshalJSON(doc)
}

// RegisterWebhooks creates (or replaces) Mutating- and
// ValidatingWebhookConfigurations pointing at a webhook server on addr
// (host:port) that serves the bed's pair: each webhook's service reference
// becomes the URL https://addr<path> and its caBundle the bed's CA.
func (b *Bed) RegisterWebhooks(ctx context.Context, cfgs []*unstructured.Unstructured, addr string) error {
	for _, u := range cfgs {
		var obj client.Object
		switch u.GetKind() {
		case "MutatingWebhookConfiguration":
			var m admissionv1.MutatingWebhookConfiguration
			if err := convert(u, &m); err != nil {
				return err
			}
			for i := range m.Webhooks {
				loopback(&m.Webhooks[i].ClientConfig, addr, b.CA)
			}
			obj = &m
		case "ValidatingWebhookConfiguration":
			var v admissionv1.ValidatingWebhookConfiguration
			if err := convert(u, &v); err != nil {
				return err
			}
			for i := range v.Webhooks {
				loopback(&v.Webhooks[i].ClientConfig, addr, b.CA)
			}
			obj = &v
		default:
			return fmt.Errorf("%s %s is not a webhook configuration", u.GetKind(), u.GetName())
		}
		if err := b.Cluster.Client.Create(ctx, obj); apierrors.IsAlreadyExists(err) {
			if err := b.Cluster.Client.Delete(ctx, obj); err != nil {
				return err
			}
			obj.SetResourceVersion("")
			err = b.Cluster.Client.Create(ctx, obj)
			if err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("registering %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func convert(u *unstructured.Unstructured, into any) error {
	j, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(j, into)
}

func loopback(cc *admissionv1.WebhookClientConfig, addr string, ca []byte) {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	} else if cc.URL != nil {
		if i := strings.Index(strings.TrimPrefix(*cc.URL, "https://"), "/"); i >= 0 {
			path = strings.TrimPrefix(*cc.URL, "https://")[i:]
		}
	}
	url := "https://" + addr + path
	cc.Service, cc.URL, cc.CABundle = nil, &url, ca
}

// ReadWebhooks reads Mutating- and ValidatingWebhookConfigurations from the
// YAML files of dir (deploy/webhook, say), for RegisterWebhooks.
func ReadWebhooks(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			u := &unstructured.Unstructured{Object: obj}
			if k := u.GetKind(); k == "MutatingWebhookConfiguration" || k == "ValidatingWebhookConfiguration" {
				out = append(out, u)
			}
		}
	}
	return out, nil
}
