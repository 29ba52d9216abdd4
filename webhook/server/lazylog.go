package server

import (
	"sync"

	"github.com/go-logr/logr"
)

// lazySink is a logr.LogSink that holds a request's identity and the
// key/values added with WithValues, and hands them to the sink below only
// when a line is logged. Each request's logger carries six values (webhook,
// uid, kind, namespace, name, operation), and zap encodes values as they
// are added: about 2 µs and 2 KB per request, for a logger most requests
// never log with. The identity is kept as plain strings, not as key/values,
// which would box each one.
type lazySink struct {
	sink logr.LogSink // already one call deeper: see withRequestValues
	id   requestID
	kvs  []any

	once     sync.Once
	resolved logr.LogSink
}

var _ logr.LogSink = (*lazySink)(nil)

// lazyBase prepares base's sink for withLazyValues: every call through a
// lazySink is one frame deeper, so the sink must skip one more frame to
// report the caller's file and line. Nil for a logger with no sink.
func lazyBase(base logr.Logger) logr.LogSink {
	sink := base.GetSink()
	if sink == nil {
		return nil
	}
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return sink
}

// requestID is what every line a request logs says about the request.
type requestID struct {
	webhook                               Mode
	uid, kind, namespace, name, operation string
}

func (r *requestID) keysAndValues() []any {
	return []any{"webhook", r.webhook, "uid", r.uid, "kind", r.kind,
		"namespace", r.namespace, "name", r.name, "operation", r.operation}
}

// withRequestValues is base.WithValues with id's key/values, encoded on
// first use; sink is lazyBase(base). The logger's sink is built in into,
// when given, which must outlive every use of the logger.
func withRequestValues(base logr.Logger, sink logr.LogSink, id requestID, into *lazySink) logr.Logger {
	if sink == nil {
		return base.WithValues(id.keysAndValues()...)
	}
	if into == nil {
		into = new(lazySink)
	}
	*into = lazySink{sink: sink, id: id}
	return logr.New(into)
}

func (s *lazySink) target() logr.LogSink {
	s.once.Do(func() { s.resolved = s.sink.WithValues(append(s.id.keysAndValues(), s.kvs...)...) })
	return s.resolved
}

// Init is a no-op: the sink below was initialised by its own logger, and
// lazyBase accounted for the extra frame.
func (s *lazySink) Init(logr.RuntimeInfo) {}

func (s *lazySink) Enabled(level int) bool { return s.sink.Enabled(level) }

func (s *lazySink) Info(level int, msg string, kvs ...any) {
	s.target().Info(level, msg, kvs...)
}

func (s *lazySink) Error(err error, msg string, kvs ...any) {
	s.target().Error(err, msg, kvs...)
}

func (s *lazySink) WithValues(kvs ...any) logr.LogSink {
	return &lazySink{sink: s.sink, id: s.id, kvs: append(append(make([]any, 0, len(s.kvs)+len(kvs)), s.kvs...), kvs...)}
}

func (s *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: s.sink.WithName(name), id: s.id, kvs: s.kvs}
}

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.sink.(logr.CallDepthLogSink); ok {
		return &lazySink{sink: cd.WithCallDepth(depth), id: s.id, kvs: s.kvs}
	}
	return s
}
