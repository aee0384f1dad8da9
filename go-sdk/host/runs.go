package host

import "iar.dev/sdk/internal/cabi"

//go:wasmimport iar:plugin/runs@1.4.0 backup
func runsBackup(ret uint32)

//go:wasmimport iar:plugin/runs@1.4.0 restore
func runsRestore(ret uint32)

// BackupObject is the whole Backup the current call belongs to, as JSON
// (Velero's velero.io/v1 Backup: metadata with labels and annotations,
// spec, status), and whether there is one: not in AppliesTo, nor in a
// restore's calls. One host call, counted against the host-call limit.
// The text is the same for every call of one pass: parse it once per
// text.
func BackupObject() (string, bool) { return askRun(runsBackup) }

// RestoreObject is the whole Restore the current restore action's call
// belongs to, as JSON, and whether there is one.
func RestoreObject() (string, bool) { return askRun(runsRestore) }

func askRun(call func(ret uint32)) (string, bool) {
	ret := cabi.NewArea(12)
	cabi.NoGC(func() { call(uint32(ret)) })
	if ret.U8(0) == 0 {
		return "", false
	}
	return ret.Str(4), true
}
