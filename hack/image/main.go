// Command image writes shepherd's OCI image without a container daemon:
// the static binary `make image` builds, as the only program on an empty
// base (FROM scratch), with an /etc/passwd naming the nonroot user it runs
// as and a writable /tmp. It writes an OCI image layout (for `crane push`,
// `skopeo copy oci:…`, or `podman load`) and, with -tarball, a tarball that
// `docker load` reads. The image is reproducible: its files and config
// carry no build time.
//
// The Dockerfile builds the same image for those who have Docker; this is
// for machines and CI that have only Go.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user the image runs as: distroless's nonroot, which the
// chart's securityContext (runAsNonRoot) and OpenShift's restricted SCC
// (an assigned UID, group 0) both accept.
const nonroot = 65532

func main() {
	binary := flag.String("binary", "", "the static linux binary to put in the image (required)")
	out := flag.String("layout", "", "write an OCI image layout to this directory (required; replaced)")
	tb := flag.String("tarball", "", "also write a `docker load` tarball to this file")
	ref := flag.String("tag", "ghcr.io/shepherd-k8s/shepherd:dev", "the image reference the tarball and the layout name")
	version := flag.String("version", "dev", "the version the image is labelled with")
	arch := flag.String("arch", runtime.GOARCH, "the binary's architecture")
	flag.Parse()
	if *binary == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*binary, *out, *tb, *ref, *version, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, out, tarPath, ref, version, arch string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", ref, err)
	}
	img, err := build(binary, version, arch)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout %s: %w", out, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.String(),
	})); err != nil {
		return fmt.Errorf("writing the image into %s: %w", out, err)
	}
	if tarPath != "" {
		if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
			return fmt.Errorf("writing %s: %w", tarPath, err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", tag, d)
	return nil
}

// build is the image: one layer holding the binary at /shepherd, and the
// config that runs it as nonroot.
func build(binary, version, arch string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
		return nil, errors.New(binary + " is not a linux (ELF) binary: build it with GOOS=linux CGO_ENABLED=0")
	}
	files, err := layerTar(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Entrypoint = []string{"/shepherd"}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "shepherd",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      "https://github.com/shepherd-k8s/shepherd",
		"org.opencontainers.image.description": "Admission policies and lifecycle for AI workloads on Kubernetes",
	}
	return mutate.ConfigFile(img, cf)
}

// layerTar is the layer's files: /shepherd, /etc/passwd and /etc/group
// naming nonroot, and /tmp (controller-runtime's default certificate
// directory is under it), all with a zero time so the digest depends on
// the binary alone.
func layerTar(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, uid int, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)),
			Uid: uid, Gid: uid, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot)
	for _, err := range []error{
		dir("etc/", 0o755),
		file("etc/passwd", 0o644, 0, []byte(passwd)),
		file("etc/group", 0o644, 0, []byte(group)),
		dir("tmp/", 0o1777),
		file("shepherd", 0o755, 0, bin),
	} {
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
