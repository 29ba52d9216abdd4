package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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
