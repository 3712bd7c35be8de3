// Package backendtest checks that an agenttun.Backend keeps what the
// agent tunnel's Store needs it to: the CA made once, records by key, and
// every write a compare-and-swap, also with writers racing.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rigger/rigger/transport/agenttun"
)

// key is a record key of kind for id.
func key(kind string, id int) string {
	return fmt.Sprintf("%s/%064x.json", kind, id)
}

// Run checks the Backend newBackend makes, empty, in each subtest.
func Run(t *testing.T, newBackend func(t *testing.T) agenttun.Backend) {
	ctx := context.Background()
	t.Run("CA", func(t *testing.T) {
		b := newBackend(t)
		if _, _, err := b.ReadCA(ctx); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("ReadCA of an empty backend: %v, want fs.ErrNotExist", err)
		}
		if err := b.CreateCA(ctx, []byte("cert"), []byte("key")); err != nil {
			t.Fatal(err)
		}
		if err := b.CreateCA(ctx, []byte("other"), []byte("other")); !errors.Is(err, agenttun.ErrExists) {
			t.Fatalf("a second CreateCA: %v, want ErrExists", err)
		}
		c, k, err := b.ReadCA(ctx)
		if err != nil || string(c) != "cert" || string(k) != "key" {
			t.Fatalf("ReadCA = %q, %q, %v; want the first CA", c, k, err)
		}
	})
	t.Run("records", func(t *testing.T) {
		b := newBackend(t)
		k := key("tokens", 1)
		if _, err := b.Get(ctx, k); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Get of a missing record: %v, want fs.ErrNotExist", err)
		}
		if err := b.Put(ctx, k, []byte("one"), ""); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, k, []byte("two"), ""); !errors.Is(err, agenttun.ErrExists) {
			t.Fatalf("a create of a record that exists: %v, want ErrExists", err)
		}
		r, err := b.Get(ctx, k)
		if err != nil || string(r.Data) != "one" || r.Version == "" || r.Key != k {
			t.Fatalf("Get = %+v, %v", r, err)
		}
		if err := b.Put(ctx, k, []byte("two"), r.Version); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, k, []byte("three"), r.Version); !errors.Is(err, agenttun.ErrConflict) {
			t.Fatalf("an update of a version no longer current: %v, want ErrConflict", err)
		}
		if err := b.Delete(ctx, k, r.Version); !errors.Is(err, agenttun.ErrConflict) {
			t.Fatalf("a removal of a version no longer current: %v, want ErrConflict", err)
		}
		r2, err := b.Get(ctx, k)
		if err != nil || string(r2.Data) != "two" {
			t.Fatalf("Get = %+v, %v; want two", r2, err)
		}
		if err := b.Put(ctx, key("nodes", 2), []byte("node"), ""); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, key("tokens", 3), []byte("tok"), ""); err != nil {
			t.Fatal(err)
		}
		list, err := b.List(ctx, "tokens")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range list {
			keys = append(keys, r.Key+"="+string(r.Data))
		}
		slices.Sort(keys)
		if want := []string{key("tokens", 1) + "=two", key("tokens", 3) + "=tok"}; !slices.Equal(keys, want) {
			t.Fatalf("List(tokens) = %v, want %v", keys, want)
		}
		if err := b.Delete(ctx, k, r2.Version); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, k, ""); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a removal of a missing record: %v, want fs.ErrNotExist", err)
		}
		if err := b.Put(ctx, k, []byte("x"), r2.Version); !errors.Is(err, agenttun.ErrConflict) {
			t.Fatalf("an update of a removed record: %v, want ErrConflict", err)
		}
		if err := b.Put(ctx, "tokens/../../etc/passwd", []byte("x"), ""); err == nil {
			t.Fatal("a key outside the records was written")
		}
	})
	t.Run("racing writers lose no update", func(t *testing.T) {
		b := newBackend(t)
		k := key("nodes", 7)
		if err := b.Put(ctx, k, []byte("0"), ""); err != nil {
			t.Fatal(err)
		}
		const writers, each = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for range writers {
			wg.Go(func() {
				for done := 0; done < each; {
					r, err := b.Get(ctx, k)
					if err != nil {
						errs <- err
						return
					}
					n, _ := strconv.Atoi(string(r.Data))
					switch err := b.Put(ctx, k, []byte(strconv.Itoa(n+1)), r.Version); {
					case err == nil:
						done++
					case !errors.Is(err, agenttun.ErrConflict):
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		r, err := b.Get(ctx, k)
		if err != nil || string(r.Data) != strconv.Itoa(writers*each) {
			t.Fatalf("after %d increments by compare-and-swap the record holds %q (%v)", writers*each, r.Data, err)
		}
	})
	t.Run("one of two removals wins", func(t *testing.T) {
		b := newBackend(t)
		for i := range 5 {
			k := key("tokens", 100+i)
			if err := b.Put(ctx, k, []byte("t"), ""); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			won := 0
			for range 3 {
				wg.Go(func() {
					if b.Delete(ctx, k, "") == nil {
						mu.Lock()
						won++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if won != 1 {
				t.Fatalf("%d of 3 removals of one record succeeded, want 1", won)
			}
		}
	})
}

// RunStores checks two Stores on one Backend, as two replicas of rigger
// serve or serve and rigger agent command: both open the one CA, and what
// one writes counts for the other at once.
func RunStores(t *testing.T, newBackend func(t *testing.T) agenttun.Backend) {
	ctx := context.Background()
	b := newBackend(t)
	now := time.Now()
	stores := make([]*agenttun.Store, 4)
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = agenttun.NewStore(ctx, b, now) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores[1:] {
		if s.CA().Checksum() != stores[0].CA().Checksum() {
			t.Fatal("stores opened at once on one backend hold different CAs")
		}
	}
	if _, err := stores[0].IssueToken("c1", "n1", time.Hour, now); err != nil {
		t.Fatal(err)
	}
	recs, err := b.List(ctx, "tokens")
	if err != nil || len(recs) != 1 || strings.Contains(string(recs[0].Data), "rgt_") {
		t.Fatalf("the backend holds %d token records (%v), want one holding the token's hash alone", len(recs), err)
	}
}
