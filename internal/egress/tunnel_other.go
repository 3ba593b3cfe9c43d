//go:build !unix

package egress

// reader returns how h reads its source: elsewhere than on unix, with a
// buffer held while it waits.
func (h *tunnelHalf) reader() readFunc { return h.heldRead }
