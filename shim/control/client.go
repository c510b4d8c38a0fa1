package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Client talks to one shim's control socket.
type Client struct {
	Path string
	hc   *http.Client
}

// NewClient returns a client of the control socket at path.
func NewClient(path string, timeout time.Duration) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{Path: path, hc: &http.Client{Transport: tr, Timeout: timeout}}
}

// Get returns the body of GET path on the socket.
func (c *Client) Get(path string) ([]byte, error) {
	resp, err := c.hc.Get("http://shim" + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// State returns the shim's default snapshot: summaries.
func (c *Client) State() (*Snapshot, error) { return c.StateQuery(Query{}) }

// StateQuery returns the shim's snapshot for q.
func (c *Client) StateQuery(q Query) (*Snapshot, error) {
	path := "/v1/state"
	if v := q.Values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	b, err := c.Get(path)
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	return &s, nil
}

// Sockets returns the control sockets in dir, sorted.
func Sockets(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sock") && e.Type()&os.ModeSocket != 0 {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}
