package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// ImageCmd is `airlock image`: the host's image store.
type ImageCmd struct {
	Pull    ImagePullCmd    `cmd:"" help:"Fetch an image from a registry (multi-platform images: this machine's) into the host's store."`
	Import  ImageImportCmd  `cmd:"" help:"Store the images of a docker save archive or an OCI layout (a directory or a tar)."`
	Ls      ImageLsCmd      `cmd:"" help:"List the stored images."`
	Inspect ImageInspectCmd `cmd:"" help:"Print a stored image as JSON: digest, names, config, layers."`
	Rm      ImageRmCmd      `cmd:"" help:"Remove images by name or digest, and the layers no other image uses."`
	Export  ImageExportCmd  `cmd:"" help:"Write stored images to a docker (docker load) or OCI archive, byte for byte: the same digests."`
	Push    ImagePushCmd    `cmd:"" help:"Send a stored image to a registry, as stored: the same digest."`
}

// RegistryFlags are a registry login for pull and push. Without them the
// host's secret registry-HOST (USER:PASSWORD or a token) is used, else
// none.
type RegistryFlags struct {
	Username      string `help:"Registry user name; the password (or access token) is read from stdin." placeholder:"USER"`
	PasswordStdin bool   `name:"password-stdin" help:"Read the password (or, without --username, a bearer token) from stdin."`
	KeyFile       string `name:"key-file" env:"AIRLOCK_SECRET_KEY_FILE" help:"Secret store key file (the registry-HOST secrets)." placeholder:"PATH"`
}

// auth returns the login the flags give; the zero one when they give none.
func (f *RegistryFlags) auth(env *Env) (host.ImageAuth, error) {
	if f.Username == "" && !f.PasswordStdin {
		return host.ImageAuth{}, nil
	}
	if !f.PasswordStdin {
		return host.ImageAuth{}, usageError{Err: errors.New("--username needs --password-stdin: a password is never an argument")}
	}
	b, err := readSecretValue(env, "the registry password")
	if err != nil {
		return host.ImageAuth{}, err
	}
	defer clear(b)
	if f.Username == "" {
		return host.ImageAuth{Token: string(b)}, nil
	}
	return host.ImageAuth{Username: f.Username, Password: string(b)}, nil
}

// withImages runs f with the image store of a host opened read-only for
// it (keyFile: the registry key file, or "" for none), and closes the host
// after.
func withImages(env *Env, keyFile string, f func(*host.ImageStore) error) error {
	h, err := host.New(hostConfig(env, hostOptions{readOnly: true, keyFile: keyFile}))
	if err != nil {
		return err
	}
	defer h.Close()
	s, err := h.Images()
	if err != nil {
		return err
	}
	return f(s)
}

// imageError gives the store's errors the command line's statuses: an
// image the store does not have is bad input.
func imageError(err error) error {
	if errors.Is(err, host.ErrNoImage) {
		return usageError{Err: err}
	}
	return err
}

// ImagePullCmd is `airlock image pull REF`.
type ImagePullCmd struct {
	RegistryFlags
	Ref  string `arg:"" help:"NAME[:TAG] or NAME@sha256:HEX; a short name is Docker Hub's (busybox: index.docker.io/library/busybox:latest)." placeholder:"REF"`
	Lazy bool   `help:"Fetch and verify only, as skopeo copy does: each layer is unpacked (and checked against the image's diff ids) at its first use, where a layer the unpacker refuses is then reported."`
	JSON bool   `name:"json" help:"Print the image as one JSON object."`
}

// Run pulls the image.
func (c *ImagePullCmd) Run(env *Env) error {
	auth, err := c.auth(env)
	if err != nil {
		return err
	}
	return withImages(env, c.KeyFile, func(s *host.ImageStore) error {
		pull, what := s.Pull, "pulled"
		if c.Lazy {
			pull, what = s.Fetch, "fetched"
		}
		img, err := pull(env.Ctx, c.Ref, auth)
		if err != nil {
			return imageError(err)
		}
		if c.JSON {
			return sandboxcli.WriteJSON(env.Stdout, img)
		}
		fmt.Fprintf(env.Stdout, "%s %s %s (%d layers, %s)\n", what, c.Ref, img.Digest, len(img.Layers), approxSize(img.Size))
		return nil
	})
}

// ImageImportCmd is `airlock image import FILE`.
type ImageImportCmd struct {
	File string   `arg:"" help:"A docker save archive (a tar, possibly gzipped), or an OCI layout: a directory or a tar of one." placeholder:"FILE|DIR"`
	Tag  []string `help:"Also name the image NAME:TAG (repeatable; an archive of one image)." placeholder:"NAME:TAG" sep:"none"`
	JSON bool     `name:"json" help:"Print each image as a JSON object."`
}

// Run imports the archive.
func (c *ImageImportCmd) Run(env *Env) error {
	if _, err := os.Stat(c.File); err != nil {
		return usageError{Err: err}
	}
	return withImages(env, "", func(s *host.ImageStore) error {
		imgs, err := s.Import(env.Ctx, c.File, c.Tag)
		if err != nil {
			return imageError(err)
		}
		return printImages(env, c.JSON, "imported", imgs...)
	})
}

// printImages says what happened to each image: a line, or a JSON object.
func printImages(env *Env, asJSON bool, what string, imgs ...host.Image) error {
	if asJSON {
		return sandboxcli.WriteJSON(env.Stdout, imgs...)
	}
	for _, img := range imgs {
		names := "(no name)"
		if len(img.Names) > 0 {
			names = strings.Join(img.Names, ", ")
		}
		fmt.Fprintf(env.Stdout, "%s %s %s (%d layers, %s)\n", what, names, img.Digest, len(img.Layers), approxSize(img.Size))
	}
	return nil
}

// ImageLsCmd is `airlock image ls`.
type ImageLsCmd struct {
	JSON bool `name:"json" help:"Print one JSON object per image."`
}

// Run lists the images, newest first: a line per name.
func (c *ImageLsCmd) Run(env *Env) error {
	return withImages(env, "", func(s *host.ImageStore) error {
		imgs, err := s.List()
		if err != nil {
			return err
		}
		if c.JSON {
			return sandboxcli.WriteJSON(env.Stdout, imgs...)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDIGEST\tPLATFORM\tLAYERS\tSIZE\tADDED")
		for _, img := range imgs {
			names := img.Names
			if len(names) == 0 {
				names = []string{"<none>"}
			}
			for _, n := range names {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", n, shortDigest(img.Digest), img.Platform, len(img.Layers),
					approxSize(img.Size), img.Added.Local().Format("2006-01-02 15:04"))
			}
		}
		return tw.Flush()
	})
}

// approxSize is n bytes in the largest unit that keeps it at least 1, to
// one decimal (2.4 MiB): a size to read, not to parse.
func approxSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// shortDigest is sha256: and the first 12 hex digits, which image
// commands take too.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// ImageInspectCmd is `airlock image inspect REF`.
type ImageInspectCmd struct {
	Ref string `arg:"" help:"A name, NAME@sha256:HEX, sha256:HEX or a unique prefix of 12 or more hex digits." placeholder:"REF"`
}

// Run prints the image as indented JSON.
func (c *ImageInspectCmd) Run(env *Env) error {
	return withImages(env, "", func(s *host.ImageStore) error {
		img, err := s.Inspect(c.Ref)
		if err != nil {
			return imageError(err)
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(img)
	})
}

// ImageRmCmd is `airlock image rm REF...`.
type ImageRmCmd struct {
	Refs []string `arg:"" help:"Images to remove: a name removes that name (and the image with its last), a digest the image and all its names." placeholder:"REF"`
}

// Run removes each image, then the layers and blobs no image uses.
func (c *ImageRmCmd) Run(env *Env) error {
	return withImages(env, "", func(s *host.ImageStore) error {
		var errs []error
		for _, ref := range c.Refs {
			removed, err := s.Remove(ref)
			if err != nil {
				errs = append(errs, imageError(err))
				continue
			}
			if len(removed) == 0 {
				fmt.Fprintf(env.Stdout, "untagged %s\n", ref)
			}
			for _, d := range removed {
				fmt.Fprintf(env.Stdout, "removed %s\n", d)
			}
		}
		return errors.Join(errs...)
	})
}

// ImageExportCmd is `airlock image export REF... -o FILE`.
type ImageExportCmd struct {
	Refs   []string `arg:"" help:"Images to write." placeholder:"REF"`
	Output string   `short:"o" required:"" help:"File to write, - for stdout." placeholder:"FILE"`
	Format string   `help:"docker (what docker load reads) or oci (an OCI layout, as a tar)." enum:"docker,oci" default:"docker"`
}

// Run writes the archive; a failed export leaves no file.
func (c *ImageExportCmd) Run(env *Env) error {
	return withImages(env, "", func(s *host.ImageStore) error {
		if c.Output == "-" {
			return imageError(s.Export(env.Ctx, c.Refs, c.Format, env.Stdout))
		}
		f, err := os.Create(c.Output)
		if err != nil {
			return usageError{Err: err}
		}
		err = s.Export(env.Ctx, c.Refs, c.Format, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(c.Output)
			return imageError(err)
		}
		return nil
	})
}

// ImagePushCmd is `airlock image push REF DEST`.
type ImagePushCmd struct {
	RegistryFlags
	Ref  string `arg:"" help:"The stored image." placeholder:"REF"`
	Dest string `arg:"" help:"Where to: NAME[:TAG]." placeholder:"DEST"`
}

// Run pushes the image and prints its digest.
func (c *ImagePushCmd) Run(env *Env) error {
	auth, err := c.auth(env)
	if err != nil {
		return err
	}
	return withImages(env, c.KeyFile, func(s *host.ImageStore) error {
		d, err := s.Push(env.Ctx, c.Ref, c.Dest, auth)
		if err != nil {
			return imageError(err)
		}
		fmt.Fprintf(env.Stdout, "pushed %s %s\n", c.Dest, d)
		return nil
	})
}

// imageRoot returns the root of the stored image ref for a sandbox.
func imageRoot(env *Env, ref string) (host.ImageRoot, error) {
	var root host.ImageRoot
	err := withImages(env, "", func(s *host.ImageStore) error {
		var err error
		root, err = s.Root(env.Ctx, ref)
		return imageError(err)
	})
	return root, err
}
