package server

import (
	"sync"

	"github.com/go-logr/logr"
)

// withRequestValues returns log with keysAndValues attached, attached only
// when something is logged. Every admission request gets a logger naming
// its uid, kind, namespace, name and operation, but an allowed request
// logs nothing; zap encodes a logger's values when they are attached,
// which cost 4 % of serve's CPU in make bench-admission (TrainJobs).
func withRequestValues(log logr.Logger, keysAndValues ...any) logr.Logger {
	sink := log.GetSink()
	if sink == nil {
		return log
	}
	return log.WithSink(&deferredSink{parent: sink, kv: keysAndValues})
}

// deferredSink holds key/values for parent until the first log call, or
// until they are handed on to a sink of their own (WithValues, WithName).
type deferredSink struct {
	parent logr.LogSink
	kv     []any
	depth  int

	once sync.Once
	sink logr.LogSink
}

var (
	_ logr.LogSink          = (*deferredSink)(nil)
	_ logr.CallDepthLogSink = (*deferredSink)(nil)
)

// resolved is parent with the values attached, made once; the call depth
// skips this sink's own frame so the log line names the real caller.
func (d *deferredSink) resolved() logr.LogSink {
	d.once.Do(func() {
		s := d.parent
		if cd, ok := s.(logr.CallDepthLogSink); ok {
			s = cd.WithCallDepth(d.depth + 1)
		}
		d.sink = s.WithValues(d.kv...)
	})
	return d.sink
}

// Init is never called: the sink is installed with Logger.WithSink on a
// parent already initialised.
func (d *deferredSink) Init(logr.RuntimeInfo) {}

func (d *deferredSink) Enabled(level int) bool { return d.parent.Enabled(level) }

func (d *deferredSink) Info(level int, msg string, keysAndValues ...any) {
	d.resolved().Info(level, msg, keysAndValues...)
}

func (d *deferredSink) Error(err error, msg string, keysAndValues ...any) {
	d.resolved().Error(err, msg, keysAndValues...)
}

func (d *deferredSink) WithValues(keysAndValues ...any) logr.LogSink {
	kv := make([]any, 0, len(d.kv)+len(keysAndValues))
	return &deferredSink{parent: d.parent, kv: append(append(kv, d.kv...), keysAndValues...), depth: d.depth}
}

func (d *deferredSink) WithName(name string) logr.LogSink {
	return &deferredSink{parent: d.parent.WithName(name), kv: d.kv, depth: d.depth}
}

func (d *deferredSink) WithCallDepth(depth int) logr.LogSink {
	return &deferredSink{parent: d.parent, kv: d.kv, depth: d.depth + depth}
}
