package integrations

import "context"

// The Watcher's tests are in package integrations_test, which can import
// the registered frameworks (integrations/all); these give them the
// unexported parts they drive.

var NewWatcherForTest = newWatcher

func (w *Watcher) LookForTest(ctx context.Context, initial bool) error { return w.look(ctx, initial) }

// SetHasSyncedForTest stands in for the CRD informer's HasSynced, which
// NewWatcher takes from the manager's cache.
func (w *Watcher) SetHasSyncedForTest(synced func() bool) { w.hasSynced = synced }
