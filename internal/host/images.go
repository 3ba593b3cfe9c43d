package host

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/secret"
)

// Image is a stored image, as the command line (which reaches the image
// store through the host) prints it.
type Image = image.Image

// ImageAuth is a registry login.
type ImageAuth = image.Auth

// ImageRoot is what a sandbox needs of an image.
type ImageRoot = image.Root

// ImageStore is the host's store of images (Host.Images).
type ImageStore = image.Store

// Image archive formats.
const (
	ImageFormatDocker = image.FormatDocker
	ImageFormatOCI    = image.FormatOCI
)

// ErrNoImage is wrapped by the errors of an image reference the store has
// no image for.
var ErrNoImage = image.ErrNotFound

// Images is the host's image store ($AIRLOCK_HOME/images), opened on first
// use. A registry's credentials, when a call gives none, are the local
// tenant's secret RegistrySecret(registry), if the secret store holds it.
func (h *Host) Images() (*image.Store, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.images != nil {
		return h.images, nil
	}
	if err := os.MkdirAll(h.cfg.Home, 0o700); err != nil {
		return nil, err
	}
	s, err := image.Open(filepath.Join(h.cfg.Home, "images"), image.Options{Credentials: h.registryAuth})
	if err != nil {
		return nil, err
	}
	h.images = s
	return s, nil
}

// RegistrySecret names the secret that holds the credentials of registry
// (a host name, with a port if it has one): registry-HOST, a colon
// written as an underscore (secret names have no colon). Its value is
// USER:PASSWORD, or a bearer token (no colon).
func RegistrySecret(registry string) string {
	return "registry-" + strings.ReplaceAll(registry, ":", "_")
}

// registryAuth reads registry's credentials from the local tenant's
// secrets; none (or no secret store) is anonymous.
func (h *Host) registryAuth(registry string) (image.Auth, error) {
	st, err := h.Secrets()
	if err != nil {
		return image.Auth{}, nil // no secret store: anonymous
	}
	v, _, err := st.Get(context.Background(), event.LocalTenant, RegistrySecret(registry))
	if errors.Is(err, secret.ErrNotFound) {
		return image.Auth{}, nil
	}
	if err != nil {
		return image.Auth{}, err
	}
	h.red.Add(v)
	return ParseRegistryAuth(string(v.Reveal())), nil
}

// ParseRegistryAuth reads a registry credential as RegistrySecret's value
// is written: USER:PASSWORD, or a bearer token.
func ParseRegistryAuth(v string) image.Auth {
	v = strings.TrimSpace(v)
	if user, pass, ok := strings.Cut(v, ":"); ok {
		return image.Auth{Username: user, Password: pass}
	}
	return image.Auth{Token: v}
}

// runImages is the engine's view of the host's image store, opened on
// first use (most runs name no image).
type runImages struct{ h *Host }

func (r runImages) Resolve(ctx context.Context, ref string) (string, error) {
	s, err := r.h.Images()
	if err != nil {
		return "", err
	}
	return s.Resolve(ctx, ref)
}

func (r runImages) Apply(ctx context.Context, ref string, spec *sandbox.Spec) error {
	s, err := r.h.Images()
	if err != nil {
		return err
	}
	return s.Apply(ctx, ref, spec)
}

// probeLayers checks what an image root needs of this machine: a sandbox
// on a stack of two layers unpacked by the image store's unpacker, the top
// one with a whiteout (a 0/0 character device) and an opaque directory
// (the user.overlay.opaque xattr), mounted as lowerdirs of the userxattr
// overlay in the sandbox's user namespace. It reads the result with the
// sandbox's own file operations, so the layers need no program.
func probeLayers(executor string) error {
	dir, err := os.MkdirTemp("", "airlock-doctor-layers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	layers := [][]tarEntry{
		{{"gone", "lower"}, {"opaque/", ""}, {"opaque/hidden", "lower"}},
		{{".wh.gone", ""}, {"opaque/", ""}, {"opaque/.wh..wh..opq", ""}, {"opaque/new", "upper"}},
	}
	var dirs []string
	for i, entries := range layers {
		d := filepath.Join(dir, fmt.Sprintf("layer%d", i))
		if _, err := image.UnpackLayer(bytes.NewReader(layerTar(entries)), d, image.Limits{}, os.Geteuid() == 0); err != nil {
			return fmt.Errorf("unpack a test layer: %w", err)
		}
		dirs = append(dirs, d)
	}
	b, err := linux.New(linux.Config{Executor: executor, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{Layers: dirs, Limits: sandbox.Limits{DiskBytes: 16 << 20}})
	if err != nil {
		return err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	for p, what := range map[string]string{
		"/gone":          "a whiteout (0/0 character device) in the upper layer does not hide the lower layer's file",
		"/opaque/hidden": "an opaque directory (user.overlay.opaque) does not hide the lower layer's files",
	} {
		_, err := sb.Stat(ctx, p)
		switch {
		case err == nil:
			return errors.New(what)
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("stat %s: %w", p, err)
		}
	}
	if _, err := sb.Stat(ctx, "/opaque/new"); err != nil {
		return fmt.Errorf("the upper layer's file is missing: %w", err)
	}
	return nil
}

// tarEntry is a file (or, with a trailing slash, a directory) and its
// content.
type tarEntry struct{ name, body string }

func layerTar(entries []tarEntry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		_ = tw.WriteHeader(h) // to a buffer: cannot fail
		_, _ = tw.Write([]byte(e.body))
	}
	_ = tw.Close()
	return b.Bytes()
}
