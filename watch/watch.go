// Package watch runs a function each time a file is saved: the engine of
// `rigger apply --watch`. It watches the file's directory, not the file, so
// that editors that save by writing a new file and renaming it over the old
// one (vim, most IDEs) are followed, and a file that is removed and created
// again is too. Bursts of events (an editor's write, chmod and rename) are
// debounced into one call.
package watch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long the file must be quiet before f runs.
const DefaultDebounce = 300 * time.Millisecond

// File calls f(ctx) once when it starts, then once after each change of
// the file at path (written, created, or renamed onto), when no further
// change came for debounce. f runs one call at a time; a change during a
// call gives one more call after it. File returns when ctx ends (nil), or
// when the directory cannot be watched. f's errors are for f to report:
// File goes on watching.
func File(ctx context.Context, path string, debounce time.Duration, f func(ctx context.Context)) error {
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("watch the directory of %s: %w", path, err)
	}

	f(ctx)
	timer := time.NewTimer(debounce)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("watch " + path + ": the watcher stopped")
			}
			if filepath.Clean(ev.Name) != abs || !ev.Has(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Chmod) {
				continue
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watch " + path + ": the watcher stopped")
			}
			return fmt.Errorf("watch %s: %w", path, err)
		case <-timer.C:
			f(ctx)
		}
	}
}
