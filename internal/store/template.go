package store

import (
	"context"
	"fmt"
	"time"
)

// MaxTemplateLen is the largest template document, in bytes.
const MaxTemplateLen = 64 << 10

// TemplateVersion is one version of a tenant's named environment template.
// Like a policy's, a template's versions are numbered 1, 2, 3... per
// tenant and name and named by the content hash of their document; unlike
// a policy, a template can be removed (DeleteTemplate), every version at
// once, after which the name starts again at 1. The store does not parse
// documents (package template does).
type TemplateVersion struct {
	Tenant string
	// Name is a valid name as policies' are (ValidateTemplateName).
	Name string
	// Version is assigned by the store.
	Version int64
	// Hash is DocumentHash(Document), filled by PutTemplate when empty.
	Hash string
	// Image is the image the template's sandboxes are made of, by digest
	// (NAME@sha256:HEX or sha256:HEX): what the caller resolved the
	// document's image to when it stored the version. Listings show it.
	Image string
	// Document is the template document (canonical YAML), 1 to
	// MaxTemplateLen bytes. Listings (TemplateVersions, ListTemplates)
	// leave it nil; GetTemplate returns it.
	Document []byte
	// Source and By: as PolicyVersion's.
	Source string
	By     string
	// CreatedAt is set by the store.
	CreatedAt time.Time
}

// Templates is the tenants' named environment templates, every version of
// each kept until the template is removed.
type Templates interface {
	// PutTemplate stores v.Document as the next version of tenant
	// v.Tenant's template v.Name and returns it as stored (Version, Hash
	// and CreatedAt set; Source and By redacted) with created true. When
	// the name's latest version has the document's hash and image, nothing
	// is written and that version is returned with created false.
	// Concurrent puts of one name get distinct versions. Errors wrapping
	// ErrInvalid: a malformed tenant or name, an empty document or one
	// over MaxTemplateLen, a Hash that is not the document's, an image
	// that is not one line of at most 512 bytes or is empty, a Version set
	// by the caller, a malformed Source or By.
	PutTemplate(ctx context.Context, v TemplateVersion) (stored TemplateVersion, created bool, err error)

	// TemplateVersions returns up to MaxPage versions of tenant's template
	// name, newest first, without documents. None gives ErrNotFound.
	TemplateVersions(ctx context.Context, tenant, name string) ([]TemplateVersion, error)

	// GetTemplate returns version of tenant's template name with its
	// document: the latest when version is 0. None gives ErrNotFound; a
	// negative version ErrInvalid.
	GetTemplate(ctx context.Context, tenant, name string, version int64) (TemplateVersion, error)

	// ListTemplates returns the latest version of each of tenant's
	// templates, up to MaxPage, ordered by name, without documents.
	ListTemplates(ctx context.Context, tenant string) ([]TemplateVersion, error)

	// DeleteTemplate removes every version of tenant's template name and
	// returns how many there were; a name without versions gives
	// ErrNotFound.
	DeleteTemplate(ctx context.Context, tenant, name string) (int64, error)
}

// ValidateTemplateName returns nil when name is a valid template name: the
// same form as a policy name (ValidatePolicyName). The error wraps
// ErrInvalid.
func ValidateTemplateName(name string) error {
	if ValidatePolicyName(name) != nil {
		return fmt.Errorf("%w: template name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
			ErrInvalid, clip(name), MaxPolicyNameLen)
	}
	return nil
}

// maxImageRef is the longest image reference a template version records.
const maxImageRef = 512

// PrepareTemplate is for implementations of Store: it validates v for
// PutTemplate and returns it as it must be stored (Hash filled, Source and
// By redacted, CreatedAt now in UTC). Errors wrap ErrInvalid and never
// quote the document.
func PrepareTemplate(v TemplateVersion, now time.Time, red Redactor) (TemplateVersion, error) {
	if err := validTenant(v.Tenant); err != nil {
		return v, err
	}
	if err := ValidateTemplateName(v.Name); err != nil {
		return v, err
	}
	sum := DocumentHash(v.Document)
	switch {
	case v.Version != 0:
		return v, fmt.Errorf("%w: template %s: version is set; the store assigns it", ErrInvalid, v.Name)
	case len(v.Document) == 0:
		return v, fmt.Errorf("%w: template %s: the document is empty", ErrInvalid, v.Name)
	case len(v.Document) > MaxTemplateLen:
		return v, fmt.Errorf("%w: template %s: the document is %d bytes, limit %d", ErrInvalid, v.Name, len(v.Document), MaxTemplateLen)
	case v.Hash != "" && v.Hash != sum:
		return v, fmt.Errorf("%w: template %s: hash %q is not the document's (%s)", ErrInvalid, v.Name, clip(v.Hash), sum)
	case v.Image == "" || len(v.Image) > maxImageRef || !printable(v.Image):
		return v, fmt.Errorf("%w: template %s: image %q: want a reference of at most %d printable bytes", ErrInvalid, v.Name, clip(v.Image), maxImageRef)
	case len(v.Source) > MaxNoteLen || !printable(v.Source):
		return v, fmt.Errorf("%w: template %s: source is not printable text of at most %d bytes", ErrInvalid, v.Name, MaxNoteLen)
	case len(v.By) > MaxNameLen || !printable(v.By):
		return v, fmt.Errorf("%w: template %s: by is not printable text of at most %d bytes", ErrInvalid, v.Name, MaxNameLen)
	}
	if red == nil {
		red = NoRedaction
	}
	v.Hash = sum
	v.Source = string(red.Bytes([]byte(v.Source)))
	v.By = string(red.Bytes([]byte(v.By)))
	v.CreatedAt = now.UTC()
	return v, nil
}

// DecideTemplate is for implementations of Store: given v
// (PrepareTemplate's) and its name's latest version (found false when
// none), read under the lock that serializes the name's puts, it returns
// the version PutTemplate returns and whether to insert it.
func DecideTemplate(v, latest TemplateVersion, found bool) (TemplateVersion, bool) {
	switch {
	case !found:
		v.Version = 1
		return v, true
	case latest.Hash != v.Hash || latest.Image != v.Image:
		v.Version = latest.Version + 1
		return v, true
	}
	return latest, false
}

// ValidateTemplateQuery is for implementations of Store: it checks the
// tenant, name and version of a template read.
func ValidateTemplateQuery(tenant, name string, version int64) error {
	if err := validTenant(tenant); err != nil {
		return err
	}
	if err := ValidateTemplateName(name); err != nil {
		return err
	}
	if version < 0 {
		return fmt.Errorf("%w: template %s: version %d: want 1 or more (0 for the latest)", ErrInvalid, name, version)
	}
	return nil
}

// TemplateNotFound is for implementations of Store: the error of a name
// without versions, or without version (0: any). It wraps ErrNotFound.
func TemplateNotFound(name string, version int64) error {
	if version == 0 {
		return fmt.Errorf("no template %s: %w", name, ErrNotFound)
	}
	return fmt.Errorf("template %s has no version v%d: %w", name, version, ErrNotFound)
}
