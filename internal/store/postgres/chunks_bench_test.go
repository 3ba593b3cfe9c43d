package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/chunk"
)

// BenchmarkChunksPut: chunks of 256 KiB put from two goroutines, as a
// checkpoint's writer does, then one Sync.
func BenchmarkChunksPut(b *testing.B) {
	st := newStore(b, store.NoRedaction)
	c := st.Chunks()
	data := make([]byte, 256<<10)
	h := chunk.TenantKey("b").Hasher()
	var mu sync.Mutex
	i := 0
	b.SetBytes(int64(len(data)))
	b.SetParallelism(1)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, len(data))
		for pb.Next() {
			mu.Lock()
			i++
			n := i
			id := h.Sum(fmt.Append(nil, n))
			mu.Unlock()
			copy(buf, fmt.Append(nil, n))
			if err := c.Put(context.Background(), id, buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if err := c.Sync(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
}
