// Package log is the part of logrus's FieldLogger that Velero plugins
// call (p.log.Infof, WithField, WithError, ...), writing to the host's
// log: iar tags each line with the plugin's name and bounds it. Fields are
// appended as logrus's text formatter writes them, key=value, sorted.
package log

import (
	"fmt"
	"sort"
	"strings"

	"iar.dev/sdk/host"
)

// Fields is logrus's.
type Fields map[string]any

// FieldLogger is the subset of logrus.FieldLogger iar offers.
type FieldLogger interface {
	WithField(key string, value any) FieldLogger
	WithFields(fields Fields) FieldLogger
	WithError(err error) FieldLogger

	Debugf(format string, args ...any)
	Infof(format string, args ...any)
	Printf(format string, args ...any)
	Warnf(format string, args ...any)
	Warningf(format string, args ...any)
	Errorf(format string, args ...any)

	Debug(args ...any)
	Info(args ...any)
	Print(args ...any)
	Warn(args ...any)
	Warning(args ...any)
	Error(args ...any)
}

// Entry is a logger with fields (logrus's *Entry).
type Entry struct {
	fields Fields
}

// New is a logger without fields, like logrus.New().
func New() *Entry { return &Entry{} }

func (e *Entry) WithField(key string, value any) FieldLogger {
	return e.WithFields(Fields{key: value})
}

func (e *Entry) WithFields(fields Fields) FieldLogger {
	merged := make(Fields, len(e.fields)+len(fields))
	for k, v := range e.fields {
		merged[k] = v
	}
	for k, v := range fields {
		merged[k] = v
	}
	return &Entry{fields: merged}
}

func (e *Entry) WithError(err error) FieldLogger { return e.WithField("error", err) }

func (e *Entry) write(level host.Level, message string) {
	host.Log(level, Line(message, e.fields))
}

// Line is message with fields appended as key=value, sorted by key, a
// value quoted when it holds a space, a quote or '=': the line the host
// log shows. Also the Velero framework's (logrus) line.
func Line(message string, fields map[string]any) string {
	if len(fields) == 0 {
		return message
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(message)
	for _, k := range keys {
		v := fmt.Sprint(fields[k])
		if strings.ContainsAny(v, " \"=") {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

func (e *Entry) Debugf(f string, a ...any)   { e.write(host.Debug, fmt.Sprintf(f, a...)) }
func (e *Entry) Infof(f string, a ...any)    { e.write(host.Info, fmt.Sprintf(f, a...)) }
func (e *Entry) Printf(f string, a ...any)   { e.write(host.Info, fmt.Sprintf(f, a...)) }
func (e *Entry) Warnf(f string, a ...any)    { e.write(host.Warn, fmt.Sprintf(f, a...)) }
func (e *Entry) Warningf(f string, a ...any) { e.write(host.Warn, fmt.Sprintf(f, a...)) }
func (e *Entry) Errorf(f string, a ...any)   { e.write(host.Error, fmt.Sprintf(f, a...)) }

func (e *Entry) Debug(a ...any)   { e.write(host.Debug, fmt.Sprint(a...)) }
func (e *Entry) Info(a ...any)    { e.write(host.Info, fmt.Sprint(a...)) }
func (e *Entry) Print(a ...any)   { e.write(host.Info, fmt.Sprint(a...)) }
func (e *Entry) Warn(a ...any)    { e.write(host.Warn, fmt.Sprint(a...)) }
func (e *Entry) Warning(a ...any) { e.write(host.Warn, fmt.Sprint(a...)) }
func (e *Entry) Error(a ...any)   { e.write(host.Error, fmt.Sprint(a...)) }
