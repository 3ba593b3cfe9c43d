package api

import "time"

// Template is one version of a tenant's environment template (airlock
// template, /v1/templates).
type Template struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// Hash is the SHA-256 of the stored document, which names the
	// version.
	Hash string `json:"hash"`
	// Image is the image the template's sandboxes are made of, by
	// digest: what the document's image was resolved to when the version
	// was created.
	Image   string    `json:"image"`
	Created time.Time `json:"created"`
	Source  string    `json:"source"`
	By      string    `json:"by"`
	// New says a create stored a new version (false: the latest version
	// had the document already). Only in answers to creates.
	New *bool `json:"new,omitempty"`
	// Document is the stored template document (YAML, canonical, its
	// image by digest). Only in answers that read one version.
	Document string `json:"document,omitempty"`
}

// TemplateList is the body of GET /v1/templates: each template at its
// latest version.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// TemplateVersionList is the body of GET /v1/templates/{name}/versions,
// newest first.
type TemplateVersionList struct {
	Versions []Template `json:"versions"`
}

// TemplateDeleted is the answer to DELETE /v1/templates/{name}: how many
// versions were removed.
type TemplateDeleted struct {
	Name     string `json:"name"`
	Versions int64  `json:"versions"`
}
