package audit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// maxListBytes bounds an answer of /audit read by Fetch: far above a full
// ring (serve's --audit-ring-size records), far below unbounded.
const maxListBytes = 64 << 20

// Fetch reads the verdicts q selects from the /audit endpoint of the
// metrics server at base (Handler's), with token as the bearer token when
// it is not empty. A refusal names the server's answer and, for 401 and
// 403, what the caller lacks.
func Fetch(ctx context.Context, c *http.Client, base *url.URL, token string, q Query) (*List, error) {
	u := base.JoinPath("audit")
	u.RawQuery = q.Values().Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBytes))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			hint = " (pass a bearer token: --token, --token-file or a kubeconfig user with a token)"
		case http.StatusForbidden:
			hint = ` (the token's user needs RBAC "get" on the non-resource URL /audit)`
		}
		return nil, fmt.Errorf("%s answered %s: %s%s", u.Redacted(), resp.Status, strings.TrimSpace(string(body)), hint)
	}
	var list List
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("%s did not answer with an audit list: %w", u.Redacted(), err)
	}
	return &list, nil
}

// ClientOptions are how `shepherd audit` reaches a metrics server's
// /audit: its flags --token, --token-file, --kubeconfig,
// --certificate-authority and --insecure-skip-tls-verify.
type ClientOptions struct {
	Token, TokenFile, Kubeconfig, CAFile string
	Insecure                             bool
}

// Client builds the HTTP client for Fetch and finds the bearer token: the
// token given, else the token file's, else the kubeconfig user's, else
// none (a server run with --metrics-secure=false needs none).
func (o ClientOptions) Client() (*http.Client, string, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.Insecure} //nolint:gosec // opt-in flag for self-signed metrics certificates
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, "", fmt.Errorf("--certificate-authority: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("--certificate-authority %s holds no PEM certificate", o.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	token := o.Token
	if token == "" && o.TokenFile != "" {
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		token = o.kubeconfigToken()
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}}, token, nil
}

// kubeconfigToken is the bearer token of the kubeconfig's current user, if
// any; without a kubeconfig the request goes out unauthenticated.
func (o ClientOptions) kubeconfigToken() string {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return ""
	}
	// clientcmd reads a user's tokenFile into BearerToken as it is; trim
	// it as client-go's file token source and --token-file do, or a
	// trailing newline makes the Authorization header invalid.
	if t := strings.TrimSpace(cfg.BearerToken); t != "" {
		return t
	}
	if cfg.BearerTokenFile != "" {
		if b, err := os.ReadFile(cfg.BearerTokenFile); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}
