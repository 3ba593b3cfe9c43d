package e2b

import "context"

// Reap runs one pass of Run's timeout keeping.
func (s *Server) Reap(ctx context.Context) { s.reap(ctx) }

// Meter runs one meter tick of Run.
func (s *Server) Meter(ctx context.Context) { s.meter(ctx) }

// Crash stops s as a killed process would: its sandboxes are gone, their
// records left as they were, and s takes no more work (its Run idles until
// its context ends).
func (s *Server) Crash() {
	s.mu.Lock()
	s.closed = true
	boxes := s.boxes
	s.boxes = map[string]*box{}
	s.mu.Unlock()
	for _, b := range boxes {
		b.mu.Lock()
		lv, frozen := b.live, b.frozen
		b.state, b.live, b.frozen = stateKilled, nil, nil
		b.mu.Unlock()
		for _, lv := range []*live{lv, frozen} {
			if lv != nil {
				_ = lv.sb.Destroy(context.Background())
				lv.procs.closeAll()
				lv.release()
			}
		}
	}
}

// SetMemInfo replaces how s reads the host's available and total memory
// (the memory pause's pressure policy).
func (s *Server) SetMemInfo(f func() (avail, total int64, err error)) { s.memInfo = f }
