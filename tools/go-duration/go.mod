// Go's own time.ParseDuration and Duration.String, for the differential
// test of iar_core::duration (crates/core/src/duration/tests.rs). Standard
// library only.
module iar.dev/tools/go-duration

go 1.26.0
