// Package fanout runs one piece of work per item (usually per node) at
// once, within a limit: the one way rigger works on several nodes in
// parallel (rigger.max_parallel).
package fanout

import (
	"context"
	"errors"
	"sync"
)

// Each calls f for every item, at most limit at a time (no limit when
// limit ≤ 0), and waits for all of them. A failure does not stop the
// others; an item not started when ctx ends gets ctx's error instead of a
// call. The result joins every error in the order of items, nil when none
// failed.
func Each[T any](ctx context.Context, items []T, limit int, f func(ctx context.Context, i int, item T) error) error {
	if limit <= 0 || limit > len(items) {
		limit = len(items)
	}
	errs := make([]error, len(items))
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i, it := range items {
		sem <- struct{}{}
		if err := ctx.Err(); err != nil {
			<-sem
			errs[i] = err
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(ctx, i, it)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
