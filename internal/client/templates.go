package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/airlockrun/airlock/internal/api"
)

// PutTemplate stores doc (a template document, YAML) as the next version
// of the tenant's template name; the server resolves its image to a
// digest and checks its policy. The answer's New says whether the version
// is new. A document the server refuses is an *Error (bad_request) saying
// why.
func (c *Client) PutTemplate(ctx context.Context, name string, doc []byte) (api.Template, error) {
	var out api.Template
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/templates/" + seg(name), raw: doc, contentType: "application/yaml"}, &out, 0)
	return out, err
}

// Templates lists the tenant's templates, each at its latest version.
func (c *Client) Templates(ctx context.Context) ([]api.Template, error) {
	var out api.TemplateList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/templates"}, &out, 0)
	return out.Templates, err
}

// TemplateVersions lists the versions of the tenant's template name,
// newest first; a name the tenant does not have is api.CodeNotFound.
func (c *Client) TemplateVersions(ctx context.Context, name string) ([]api.Template, error) {
	var out api.TemplateVersionList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/templates/" + seg(name) + "/versions"}, &out, 0)
	return out.Versions, err
}

// Template returns version of the tenant's template name (0: the latest)
// with its document. A name or version the tenant does not have is
// api.CodeNotFound.
func (c *Client) Template(ctx context.Context, name string, version int64) (api.Template, error) {
	ref := "latest"
	if version != 0 {
		ref = "v" + strconv.FormatInt(version, 10)
	}
	var out api.Template
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/templates/" + seg(name) + "/versions/" + seg(ref)}, &out, 0)
	return out, err
}

// DeleteTemplate removes every version of the tenant's template name and
// returns how many there were; none is api.CodeNotFound.
func (c *Client) DeleteTemplate(ctx context.Context, name string) (int64, error) {
	var out api.TemplateDeleted
	err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/templates/" + seg(name)}, &out, 0)
	return out.Versions, err
}
