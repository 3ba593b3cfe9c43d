// Package image is the host's store of OCI images: pulled from any OCI or
// Docker v2 registry, imported from a `docker save` archive or an OCI
// layout, listed, inspected, removed, exported and pushed, and unpacked
// once into the read-only layer directories that sandboxes use as their
// root (sandbox.Spec.Layers). Registry protocol and formats are
// go-containerregistry's; this package adds the store, the checks at its
// boundary and the unpacker.
//
// Layout, under the store's directory ($AIRLOCK_HOME/images, 0700):
//
//	images.json        the images (by manifest digest) and their names
//	roots              the same, as the front end's lookup reads it without
//	                   encoding/json, bound to the images.json it was
//	                   made from (imageroot.WriteRoots)
//	blobs/sha256/HEX   manifests, configs and compressed layers, as pulled
//	layers/HEX         each layer unpacked, named by its diff id (the
//	                   digest of its uncompressed tar)
//	tmp/               downloads and unpacks in progress
//	lock, gc.lock      flock(2) files (see below)
//
// Invariants:
//   - Content-addressed: every blob that enters is hashed on the way in and
//     kept only if it matches the digest that names it (a manifest pulled by
//     tag is named by its own hash); a layer is kept only if its
//     uncompressed stream matches the image config's diff id. A tampered
//     blob is refused, whatever the registry or the archive said.
//   - A layer is unpacked once, into tmp/, and renamed into layers/ only when
//     complete and verified (renameat2 RENAME_NOREPLACE): a crash never
//     leaves a half layer under a digest. Every image, sandbox and tenant
//     that uses a layer shares that one directory, mounted read-only.
//   - Unpacking is an attack surface (see UnpackLayer): nothing a layer says
//     is ever written outside its directory.
//   - Garbage collection (GC, run by Remove) removes the blobs and layers
//     that no image references, never one in use: a pull or an import holds
//     gc.lock shared while it adds blobs and layers the index does not name
//     yet, and a sandbox holds its layers' directories locked shared
//     (sandbox.Spec.Layers); GC takes both exclusively, and renames a layer
//     away before it removes it.
//   - Images are the host's, not a tenant's: a layer is data any tenant's
//     sandbox may read, and what a run used is recorded by digest.
//
// Replicas: several airlock processes on one machine share a store (the
// locks above). Machines do not share one: each node has its own store, and
// a run records its image by digest (name@sha256:...), so a node that lacks
// it pulls it by that digest from the registry it names, into its own store,
// and gets exactly the image the run started with (Store.Root with a
// puller).
//
// Importers: internal/build, internal/host (the store, and the engine's view of it),
// bench/pullprof (a pull under the profiler).
package image
