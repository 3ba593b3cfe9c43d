// Package checkpoint stores a sandbox's workspace at a step as a
// checkpoint that costs what the step changed: the host side of issue 22.
// The executor streams what changed in /workspace as a delta stream (a tar
// stream, "airlock delta v1", docs/checkpoints.md); Write checks it entry
// by entry, cuts the content of its files into content-defined chunks
// (FastCDC with a gear table of the tenant's, cdc.go; a manifest records
// slices of chunks, so checkpoints cut by the Rabin chunker before it
// restore as ever), stores the chunks the tenant does not have
// yet (package chunk: zstd, named by a per-tenant HMAC), and stores a
// manifest (Manifest) chained to the parent checkpoint as a blob whose
// digest names the checkpoint. Resolve applies a chain back into a tree,
// WriteTar and Restore stream it as a tar for the sandbox to unpack,
// Changed and Open give what changed between two checkpoints and its
// content, for patches and verification, from manifests alone. Take and
// RestoreInto are the one way a host component checkpoints a live sandbox
// (sandbox.Checkpointer) and restores a checkpoint into a fresh one.
//
// Invariants:
//   - Every entry of a stream is checked before it is applied: names
//     relative, without "." or ".." components, empty components or NUL;
//     known types only; a directory for every entry to be in; hard links
//     to files of the tree; whiteouts only in deltas, of names the stream
//     does not also write; sizes and counts bounded (MaxEntries,
//     MaxFileSize, MaxName). The first entry out of the contract fails the
//     write with an error wrapping ErrStream that names it; a stream
//     truncated anywhere, even between entries, fails too.
//   - A checkpoint is recorded only complete: its chunks are synced
//     before its manifest is stored, and a manifest is stored whole or not
//     at all (package blob).
//   - A manifest is checked when it is read as thoroughly as a stream
//     (ErrCorrupt); a chain is followed at most MaxChain deep, never in a
//     cycle, and only through one tenant's manifests (ErrTenant); a chunk
//     is used only once its content hashes to its ID under the tenant's
//     key.
//   - Memory is bounded by a few chunks per CPU and the entries of the
//     trees at hand, never by a file's or a tree's size.
//   - Chunks are keyed per tenant (package chunk says why): a tenant
//     deduplicates against its own runs and forks, never against another
//     tenant.
//   - Chains stay short: a delta past CompactDepth (more in a large tree,
//     up to MaxChain-1: write.go says why), or whose chain holds more than
//     1/CompactShare of its base's entries, is written as a full
//     checkpoint, which refers to the chunks already stored.
//
// Garbage collection is not here: Manifest lists what a checkpoint refers
// to (ChunkIDs), chunk.Store lists and deletes chunks.
//
// Importers: the run engine (internal/engine), the E2B API's pause and
// snapshots (internal/e2b) and host wiring (internal/host), which builds
// the one Store they share.
package checkpoint
