package framework

import (
	"io"

	"github.com/sirupsen/logrus"

	"iar.dev/sdk/host"
	"iar.dev/sdk/log"
)

// LogLevelSetting is the plugin setting for the logger's level (logrus's
// names: debug, info, warning, ...), as Velero passes --log-level to its
// plugins; info when unset, as Velero's default.
const LogLevelSetting = "log-level"

// newLogger is a logrus logger whose entries go to the host log: each
// line is the message and the entry's fields, key=value sorted (as the
// SDK's log package writes them), at the entry's level. Nothing is
// formatted for an io.Writer.
func newLogger() *logrus.Logger {
	l := logrus.New()
	l.Out = io.Discard
	l.Formatter = discard{}
	l.Level = logrus.InfoLevel
	if v, ok := host.Config(LogLevelSetting); ok {
		if lvl, err := logrus.ParseLevel(v); err == nil {
			l.Level = lvl
		}
	}
	l.AddHook(hostHook{})
	return l
}

type discard struct{}

func (discard) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

type hostHook struct{}

func (hostHook) Levels() []logrus.Level { return logrus.AllLevels }

func (hostHook) Fire(e *logrus.Entry) error {
	host.Log(hostLevel(e.Level), log.Line(e.Message, e.Data))
	return nil
}

func hostLevel(l logrus.Level) host.Level {
	switch l {
	case logrus.TraceLevel:
		return host.Trace
	case logrus.DebugLevel:
		return host.Debug
	case logrus.InfoLevel:
		return host.Info
	case logrus.WarnLevel:
		return host.Warn
	default: // error, fatal, panic
		return host.Error
	}
}
