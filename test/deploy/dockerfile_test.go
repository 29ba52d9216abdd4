package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// TestDockerfileMatchesModuleAndDeployment: the image is built with the
// module's Go version, runs from a distroless static nonroot base as the
// same non-root user the Deployment's securityContext requires, and its
// entrypoint is the binary the Deployment's args ("serve ...") expect.
// (No container engine here: the image itself is built elsewhere.)
func TestDockerfileMatchesModuleAndDeployment(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	dockerfile, gomod := read("Dockerfile"), read("go.mod")

	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	builder := regexp.MustCompile(`(?m)^FROM golang:(\d+\.\d+)\S* AS build`).FindStringSubmatch(dockerfile)
	if goVersion == nil || builder == nil || builder[1] != goVersion[1] {
		t.Errorf("builder image Go %v, go.mod Go %v: they must match", builder, goVersion)
	}
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(dockerfile, -1)
	if len(froms) < 2 || froms[len(froms)-1][1] != "gcr.io/distroless/static:nonroot" {
		t.Errorf("final stage %v, want a multi-stage build ending FROM gcr.io/distroless/static:nonroot", froms)
	}
	if !strings.Contains(dockerfile, "CGO_ENABLED=0") {
		t.Error("the binary must be static (CGO_ENABLED=0) for the static base")
	}
	user := regexp.MustCompile(`(?m)^USER (\d+)`).FindStringSubmatch(dockerfile)
	dep := one[appsv1.Deployment](t, build(t, deployDir("default")), "Deployment", "shepherd")
	psc := dep.Spec.Template.Spec.SecurityContext
	if user == nil || psc == nil || psc.RunAsUser == nil || user[1] != itoa(*psc.RunAsUser) {
		t.Errorf("Dockerfile USER %v and the Deployment's runAsUser must be the same non-root user", user)
	}
	if !strings.Contains(dockerfile, `ENTRYPOINT ["/shepherd"]`) || dep.Spec.Template.Spec.Containers[0].Args[0] != "serve" {
		t.Error(`want ENTRYPOINT ["/shepherd"] and the Deployment's args starting with serve`)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
