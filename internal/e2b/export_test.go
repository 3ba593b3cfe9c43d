package e2b

import "context"

// Reap runs one pass of Run's timeout keeping.
func (s *Server) Reap(ctx context.Context) { s.reap(ctx) }
