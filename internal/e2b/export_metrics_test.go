package e2b

import "context"

// SampleMetrics runs one pass of the metrics sampler.
func (s *Server) SampleMetrics(ctx context.Context) { s.sampleAll(ctx) }

// RunMetrics runs the metrics sampler until ctx ends.
func (s *Server) RunMetrics(ctx context.Context) { s.runMetrics(ctx) }
