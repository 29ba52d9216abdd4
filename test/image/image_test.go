//go:build linux

// Package image builds shepherd's OCI image as a user does, with `make
// image` (no container daemon), and checks what a container runtime would
// get: the config (entrypoint, nonroot user), a static binary on an empty
// base, and that the binary unpacked from the image runs `version` and
// `check` offline.
package image

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

const tag = "registry.example.com/shepherd:image-test"

func TestMakeImageRunsFromTheUnpackedImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image")
	}
	root := cluster.RepoRoot()
	build := exec.Command("make", "-s", "image", "IMAGE="+tag, "VERSION=v0.0.0-image-test")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}

	// The layout names one image, by the tag asked for.
	idx, err := layout.ImageIndexFromPath(filepath.Join(root, "bin", "image", "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != tag {
		t.Fatalf("layout index %+v: want one image named %s", im.Manifests, tag)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	// The docker-load tarball holds the same image: the same config,
	// which names the layers' contents (docker's tarball format has its
	// own manifest).
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(filepath.Join(root, "bin", "image", "shepherd.tar"), &ref)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := configName(t, img), configName(t, loaded); a != b {
		t.Errorf("the tarball's image config %s is not the layout's %s", b, a)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || !slices.Equal(c.Entrypoint, []string{"/shepherd"}) || !slices.Equal(c.Cmd, []string{"serve"}) ||
		c.User != "65532:65532" || c.Labels["org.opencontainers.image.version"] != "v0.0.0-image-test" {
		t.Errorf("config: os %s, entrypoint %v, cmd %v, user %q, labels %v; want linux, [/shepherd], [serve], 65532:65532, the version",
			cf.OS, c.Entrypoint, c.Cmd, c.User, c.Labels)
	}

	// Unpacked, as a runtime lays the filesystem out.
	fsDir := t.TempDir()
	unpack(t, img, fsDir)
	var files []string
	if err := filepath.WalkDir(fsDir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fsDir, p)
		files = append(files, rel)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{".", "etc", "etc/group", "etc/passwd", "shepherd", "tmp"}; !slices.Equal(files, want) {
		t.Errorf("the image's files %v, want %v: an empty base", files, want)
	}
	bin := filepath.Join(fsDir, "shepherd")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/shepherd asks for a dynamic loader: on an empty base it cannot start")
		}
	}
	f.Close()
	if passwd, err := os.ReadFile(filepath.Join(fsDir, "etc", "passwd")); err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd %q (%v): want the nonroot user", passwd, err)
	}

	out := run(t, bin, "version", "-o", "json")
	var v struct{ Version string }
	if err := json.Unmarshal(out, &v); err != nil || v.Version != "v0.0.0-image-test" {
		t.Errorf("shepherd version -o json: %s (%v), want the version make image was given", out, err)
	}
	if out := run(t, bin, "check", "-f", filepath.Join(root, "examples", "valid")); !bytes.Contains(out, []byte("allowed")) {
		t.Errorf("shepherd check -f examples/valid:\n%s", out)
	}
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// unpack writes the image's flattened filesystem into dir with tar, as a
// container runtime would lay it out.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.Command("tar", "-x", "-C", dir, "--no-same-owner")
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpacking the image: %v\n%s", err, out)
	}
}

// run runs the unpacked binary in an empty environment, from an empty
// directory, and wants exit 0.
func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = t.TempDir(), []string{"HOME=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", filepath.Base(bin), args, err, out, stderr.String())
	}
	return out
}
