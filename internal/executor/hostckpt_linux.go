package executor

import (
	"io"

	"github.com/airlockrun/airlock/internal/execproto"
)

// COWCheckpoints takes the checkpoints of a cow workspace from outside the
// sandbox, where its overlay and upper layer are mounted: the host does it
// for a gvisor sandbox, whose cow workspace is the host's overlay (gVisor's
// gofer shows the executor neither the upper layer's opaque marks, which
// are extended attributes, nor one inode for the names of a hard link). The
// walk, the baselines and the stream are the executor's own (checkpoints),
// with the merged tree at a path and the upper layer by descriptor.
type COWCheckpoints struct{ c *checkpoints }

// NewCOWCheckpoints keys the cow workspace whose overlay is mounted at
// merged, with upper an O_PATH descriptor of its upper layer (kept open by
// the caller while the checkpoints are in use). With upper -1, merged is a
// plain directory (an rw workspace) and a delta walks the whole tree (the
// executor's own keep a dirty set for a native rw workspace; this has
// none).
func NewCOWCheckpoints(merged string, upper int) *COWCheckpoints {
	return &COWCheckpoints{c: newCheckpoints(merged, upper)}
}

// Take writes the delta since the baseline named since (the whole tree
// when it is unknown) to w, unless markOnly, in frames of chunk bytes, and
// records a new baseline; a close of stop abandons it. It is what a
// checkpoint request to the executor does.
func (h *COWCheckpoints) Take(since string, markOnly bool, w io.Writer, chunk int, stop <-chan struct{}) (execproto.CheckpointResult, error) {
	return h.c.take(since, markOnly, w, chunk, stop)
}

// TakeWith is Take with the FIFOs the sandbox sees in the workspace
// (OpSpecialFiles), which gVisor keeps in its memory and the host's tree
// does not hold: they are keyed in the baseline beside the tree's entries
// and written in the stream where they belong, as if the walk had met
// them (new or changed ones, whiteouts of those gone; all in a full
// stream). A FIFO the tree holds too is the tree's.
func (h *COWCheckpoints) TakeWith(since string, markOnly bool, specials []execproto.Special, w io.Writer, chunk int, stop <-chan struct{}) (execproto.CheckpointResult, error) {
	return h.c.takeWith(since, markOnly, specials, w, chunk, stop)
}
