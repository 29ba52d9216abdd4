package audit

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The token is the one given, else the token file's (trimmed), else the
// kubeconfig user's token or token file, else none.
func TestClientFindsTheToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := testkit.WriteFile(t, dir, "token", "  from-file\n")
	userTokenFile := testkit.WriteFile(t, dir, "user-token", "from-user-file\n")
	kubeconfig := func(user string) string {
		return testkit.WriteFile(t, dir, "kubeconfig-"+strings.Fields(user)[0], `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {`+user+`}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)
	}
	withToken := kubeconfig("token: from-kubeconfig")
	withTokenFile := kubeconfig("tokenFile: " + userTokenFile)
	noToken := kubeconfig("username: nobody")
	for _, tc := range []struct {
		name string
		opts ClientOptions
		want string
	}{
		{"given", ClientOptions{Token: "given", TokenFile: tokenFile, Kubeconfig: withToken}, "given"},
		{"the token file", ClientOptions{TokenFile: tokenFile, Kubeconfig: withToken}, "from-file"},
		{"the kubeconfig user's token", ClientOptions{Kubeconfig: withToken}, "from-kubeconfig"},
		{"the kubeconfig user's token file", ClientOptions{Kubeconfig: withTokenFile}, "from-user-file"},
		{"a kubeconfig user without one", ClientOptions{Kubeconfig: noToken}, ""},
		{"a kubeconfig that does not exist", ClientOptions{Kubeconfig: dir + "/missing"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, token, err := tc.opts.Client()
			if err != nil {
				t.Fatal(err)
			}
			if token != tc.want || c == nil {
				t.Errorf("token %q, want %q", token, tc.want)
			}
		})
	}
	if _, _, err := (ClientOptions{TokenFile: dir + "/missing"}).Client(); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("a token file that does not exist: %v, want an error naming --token-file", err)
	}
}

// A CA file makes the client trust exactly that CA; a file without a
// certificate, or none, is an error naming the flag; without one, only
// --insecure-skip-tls-verify reaches a self-signed server.
func TestClientTrustsTheCAGiven(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	dir := t.TempDir()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ca := testkit.WriteFile(t, dir, "ca.crt", string(caPEM))
	get := func(opts ClientOptions) error {
		opts.Kubeconfig = dir + "/none" // no kubeconfig of the machine's
		c, _, err := opts.Client()
		if err != nil {
			return err
		}
		resp, err := c.Get(srv.URL)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(ClientOptions{CAFile: ca}); err != nil {
		t.Errorf("with the server's CA: %v", err)
	}
	if err := get(ClientOptions{}); err == nil {
		t.Error("a self-signed server was trusted without its CA")
	}
	if err := get(ClientOptions{Insecure: true}); err != nil {
		t.Errorf("--insecure-skip-tls-verify: %v", err)
	}
	notPEM := testkit.WriteFile(t, dir, "not.pem", "hello")
	if err := get(ClientOptions{CAFile: notPEM}); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
	if err := get(ClientOptions{CAFile: dir + "/missing"}); err == nil || !strings.Contains(err.Error(), "--certificate-authority") {
		t.Errorf("a CA file that does not exist: %v", err)
	}
	c, _, err := ClientOptions{Kubeconfig: dir + "/none"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Transport.(*http.Transport).TLSClientConfig.MinVersion; v != tls.VersionTLS12 {
		t.Errorf("minimum TLS version %x, want TLS 1.2", v)
	}
}

// A kubeconfig user whose tokenFile ends in a newline: the token is sent
// trimmed, as --token-file's is.
func TestKubeconfigTokenFileIsTrimmed(t *testing.T) {
	dir := t.TempDir()
	tf := testkit.WriteFile(t, dir, "user-token", "from-user-file\n")
	kc := testkit.WriteFile(t, dir, "kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {tokenFile: "+tf+"}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		_, _ = w.Write([]byte(`{"items":[]}`))
	}))
	defer srv.Close()
	c, token, err := ClientOptions{Kubeconfig: kc}.Client()
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(srv.URL)
	if _, err := Fetch(context.Background(), c, base, token, Query{}); err != nil {
		t.Fatalf("Fetch with the kubeconfig's token: %v", err)
	}
	if got != "Bearer from-user-file" {
		t.Errorf("Authorization %q", got)
	}
}
