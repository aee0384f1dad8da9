//! Printing `iar test` results: readable text, JSON, and JUnit XML for CI.

use super::runner::FileReport;
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use serde_json::json;

/// Passed and failed case counts.
pub fn counts(files: &[FileReport]) -> (usize, usize) {
    let cases = files.iter().flat_map(|f| &f.cases);
    let failed = cases.clone().filter(|c| !c.failures.is_empty()).count();
    (cases.count() - failed, failed)
}

/// One line per case, failures indented under it, a summary last.
pub fn text(files: &[FileReport]) -> String {
    let mut out = String::new();
    for f in files {
        for c in &f.cases {
            let status = if c.failures.is_empty() {
                "ok  "
            } else {
                "FAIL"
            };
            out += &format!("{status} {} › {}\n", f.file, c.name);
            for failure in &c.failures {
                for (i, line) in failure.lines().enumerate() {
                    let lead = if i == 0 { "     - " } else { "       " };
                    out += &format!("{lead}{line}\n");
                }
            }
            // The plugin's own account of a failed case, where it helps most.
            if !c.failures.is_empty() && !c.logs.is_empty() {
                out += "     plugin log:\n";
                for line in &c.logs {
                    out += &format!("       {line}\n");
                }
            }
        }
    }
    let (passed, failed) = counts(files);
    out += &format!(
        "\n{} cases: {passed} passed, {failed} failed\n",
        passed + failed
    );
    out
}

pub fn json(files: &[FileReport]) -> serde_json::Value {
    let (passed, failed) = counts(files);
    json!({ "passed": passed, "failed": failed, "files": files })
}

/// JUnit XML: one `testsuite` per file, one `testcase` per case, a
/// `failure` holding every message of a failed case and `system-out` the
/// plugin's log lines.
pub fn junit(files: &[FileReport]) -> anyhow::Result<String> {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let (passed, failed) = counts(files);
    let mut suites = BytesStart::new("testsuites");
    suites.push_attribute(("name", "iar test"));
    suites.push_attribute(("tests", (passed + failed).to_string().as_str()));
    suites.push_attribute(("failures", failed.to_string().as_str()));
    w.write_event(Event::Start(suites))?;
    for f in files {
        let failures = f.cases.iter().filter(|c| !c.failures.is_empty()).count();
        let time: f64 = f.cases.iter().map(|c| c.duration_ms).sum::<f64>() / 1000.0;
        let mut suite = BytesStart::new("testsuite");
        suite.push_attribute(("name", f.file.as_str()));
        suite.push_attribute(("tests", f.cases.len().to_string().as_str()));
        suite.push_attribute(("failures", failures.to_string().as_str()));
        suite.push_attribute(("errors", "0"));
        suite.push_attribute(("time", format!("{time:.3}").as_str()));
        w.write_event(Event::Start(suite))?;
        for c in &f.cases {
            let mut case = BytesStart::new("testcase");
            case.push_attribute(("name", c.name.as_str()));
            case.push_attribute(("classname", f.file.as_str()));
            case.push_attribute(("time", format!("{:.3}", c.duration_ms / 1000.0).as_str()));
            if c.failures.is_empty() {
                w.write_event(Event::Empty(case))?;
                continue;
            }
            w.write_event(Event::Start(case))?;
            let mut failure = BytesStart::new("failure");
            let first = c.failures[0].lines().next().unwrap_or_default();
            failure.push_attribute(("message", first));
            w.write_event(Event::Start(failure))?;
            w.write_event(Event::Text(BytesText::new(&c.failures.join("\n"))))?;
            w.write_event(Event::End(BytesEnd::new("failure")))?;
            if !c.logs.is_empty() {
                w.write_event(Event::Start(BytesStart::new("system-out")))?;
                w.write_event(Event::Text(BytesText::new(&c.logs.join("\n"))))?;
                w.write_event(Event::End(BytesEnd::new("system-out")))?;
            }
            w.write_event(Event::End(BytesEnd::new("testcase")))?;
        }
        w.write_event(Event::End(BytesEnd::new("testsuite")))?;
    }
    w.write_event(Event::End(BytesEnd::new("testsuites")))?;
    let mut xml = String::from_utf8(w.into_inner())?;
    xml.push('\n');
    Ok(xml)
}
