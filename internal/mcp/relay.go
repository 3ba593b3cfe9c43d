package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"
)

// Relay carries one MCP session between local, a client's transport
// (stdio), and a server's /mcp at url, as key: `airlock mcp` against a
// server. Every message passes unchanged both ways until either side ends;
// the server decides everything.
func Relay(ctx context.Context, local sdk.Transport, url, key string, hc *http.Client) error {
	if hc == nil {
		hc = &http.Client{}
	}
	hc = &http.Client{Transport: bearer{key: key, next: hc.Transport}, Timeout: hc.Timeout}
	remote, err := (&sdk.StreamableClientTransport{Endpoint: strings.TrimSuffix(url, "/") + "/mcp", HTTPClient: hc}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp: connect to %s: %w", url, err)
	}
	defer remote.Close()
	near, err := local.Connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp: connect the client: %w", err)
	}
	defer near.Close()
	g, ctx := errgroup.WithContext(ctx)
	pump := func(from, to sdk.Connection) func() error {
		return func() error {
			defer from.Close() // unblocks the other pump's Read through its Write failing
			defer to.Close()
			for {
				m, err := from.Read(ctx)
				if err != nil {
					return err
				}
				if err := to.Write(ctx, m); err != nil {
					return err
				}
			}
		}
	}
	g.Go(pump(near, remote))
	g.Go(pump(remote, near))
	err = g.Wait()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || errors.Is(err, sdk.ErrConnectionClosed) {
		return nil
	}
	return err
}

// bearer adds the API key to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	next := b.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}
