// Command shepherd is the admission webhook server, policy engine and
// reconcile loop for AI workloads on Kubernetes. Run `shepherd --help`.
package main

import (
	"os"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
)

func main() { os.Exit(app.Main(os.Args[1:], os.Stdout, os.Stderr)) }
