package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// runSpanContext is the span context of run runID's root span: its trace
// and span ids are derived from the run id, so that every process adds the
// spans it makes for the run to one trace under one root, whichever of
// them records that root. It is marked remote: the root may be recorded
// by another process.
func runSpanContext(runID string) trace.SpanContext {
	sum := sha256.Sum256([]byte("airlock run trace\x00" + runID))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	if !tid.IsValid() { // all zero: a 2^-128 chance, but an invalid id is dropped
		tid[15] = 1
	}
	if !sid.IsValid() {
		sid[7] = 1
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// forcedKey is the context key of the ids the next root span must have.
type forcedKey struct{}

// withForcedIDs returns ctx asking idGenerator to give the root span
// started with it the ids of sc.
func withForcedIDs(ctx context.Context, sc trace.SpanContext) context.Context {
	return context.WithValue(ctx, forcedKey{}, sc)
}

// idGenerator makes random ids, except for a root span started with
// withForcedIDs, which gets the ids asked for (a run's root span).
type idGenerator struct{}

// NewIDs implements sdktrace.IDGenerator.
func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := ctx.Value(forcedKey{}).(trace.SpanContext); ok && sc.IsValid() {
		return sc.TraceID(), sc.SpanID()
	}
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64()|1) // never all zero
	return tid, newSpanID()
}

// NewSpanID implements sdktrace.IDGenerator.
func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1)
	return sid
}
