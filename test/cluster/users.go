package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeconfigAs adds a user of the control plane with a client certificate of
// its own, in group system:masters, writes a kubeconfig for it into
// dir/<user>.kubeconfig and returns the path and the user's rest.Config. A
// process run with it shows in the apiserver's audit log as that user.
func (c *Cluster) KubeconfigAs(dir, user string) (string, *rest.Config, error) {
	path := filepath.Join(dir, user+".kubeconfig")
	cfg, err := c.writeUserKubeconfig(path, envtest.User{Name: user, Groups: []string{"system:masters"}})
	return path, cfg, err
}

// writeKubeconfig adds u (a client certificate) and writes its kubeconfig
// to path.
func (c *Cluster) writeKubeconfig(path string, u envtest.User) (string, error) {
	_, err := c.writeUserKubeconfig(path, u)
	return path, err
}

func (c *Cluster) writeUserKubeconfig(path string, user envtest.User) (*rest.Config, error) {
	u, err := c.Env.AddUser(user, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", user.Name, err)
	}
	cfg := u.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user"}
	kc.CurrentContext = "envtest"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig of %s: %w", user.Name, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return cfg, nil
}
