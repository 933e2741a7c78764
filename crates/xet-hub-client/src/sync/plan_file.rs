//! Sync plans as JSONL, the form `hf buckets sync --plan` writes and `--apply` reads: a
//! header line (`type: header`, source, dest, timestamp, summary), then one line per
//! operation (`type: operation`, action, path, reason, size?, local_mtime?,
//! remote_mtime?). Lines of other types are skipped when read, as `hf` does.

use serde::{Deserialize, Serialize};

use super::{Action, Op, Plan, Summary};

#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Header {
        source: String,
        dest: String,
        timestamp: String,
        #[serde(default)]
        summary: Option<Summary>,
    },
    Operation {
        action: Action,
        path: String,
        #[serde(default)]
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        local_mtime: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote_mtime: Option<String>,
    },
}

/// Why a plan file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("the plan is empty: no header line")]
    Empty,
    #[error("the first line of the plan is not its header (type \"header\")")]
    NoHeader,
    #[error("line {line} of the plan is not valid")]
    Line {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
}

/// The plan as JSONL text.
pub fn write(plan: &Plan) -> String {
    let mut out = String::new();
    let header = Line::Header {
        source: plan.source.clone(),
        dest: plan.dest.clone(),
        timestamp: plan.timestamp.clone(),
        summary: Some(plan.summary()),
    };
    push(&mut out, &header);
    for op in &plan.ops {
        let line = Line::Operation {
            action: op.action,
            path: op.path.clone(),
            reason: op.reason.clone(),
            size: op.size,
            local_mtime: op.local_mtime.clone(),
            remote_mtime: op.remote_mtime.clone(),
        };
        push(&mut out, &line);
    }
    out
}

fn push(out: &mut String, line: &Line) {
    out.push_str(&serde_json::to_string(line).expect("plan lines always serialize"));
    out.push('\n');
}

/// The plan in JSONL `text`. Paths are not checked here: running a plan checks them.
pub fn read(text: &str) -> Result<Plan, PlanFileError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().ok_or(PlanFileError::Empty)?;
    let parse = |n: usize, l: &str| -> Result<serde_json::Value, PlanFileError> {
        serde_json::from_str(l).map_err(|source| PlanFileError::Line {
            line: n + 1,
            source,
        })
    };
    let header = parse(0, first)?;
    if header.get("type").and_then(|t| t.as_str()) != Some("header") {
        return Err(PlanFileError::NoHeader);
    }
    let Line::Header {
        source,
        dest,
        timestamp,
        ..
    } = serde_json::from_value(header).map_err(|source| PlanFileError::Line { line: 1, source })?
    else {
        return Err(PlanFileError::NoHeader);
    };
    let mut ops = Vec::new();
    for (n, l) in lines {
        let v = parse(n, l)?;
        if v.get("type").and_then(|t| t.as_str()) != Some("operation") {
            continue;
        }
        let op = serde_json::from_value(v).map_err(|source| PlanFileError::Line {
            line: n + 1,
            source,
        })?;
        if let Line::Operation {
            action,
            path,
            reason,
            size,
            local_mtime,
            remote_mtime,
        } = op
        {
            ops.push(Op {
                action,
                path,
                reason,
                size,
                local_mtime,
                remote_mtime,
            });
        }
    }
    Ok(Plan {
        source,
        dest,
        timestamp,
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hfs_own_form() {
        let plan = Plan {
            source: "./data".into(),
            dest: "hf://buckets/o/b/ckpt".into(),
            timestamp: "2026-12-06T09:30:00.123000+00:00".into(),
            ops: vec![
                Op {
                    action: Action::Upload,
                    path: "a/b.bin".into(),
                    reason: "new file".into(),
                    size: Some(12),
                    local_mtime: Some("2026-12-06T09:30:00+00:00".into()),
                    remote_mtime: None,
                },
                Op {
                    action: Action::Delete,
                    path: "old".into(),
                    reason: "not in source (--delete)".into(),
                    size: Some(3),
                    local_mtime: None,
                    remote_mtime: Some("2026-12-06T09:30:00+00:00".into()),
                },
            ],
        };
        let text = write(&plan);
        assert_eq!(read(&text).unwrap(), plan);
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["summary"]["uploads"], 1);
        assert_eq!(first["summary"]["total_size"], 12);
        // Written by Python's json.dumps (spaces after separators), with a line of
        // another type that is skipped.
        let hf = r#"{"type": "header", "source": "hf://buckets/o/b", "dest": "out", "timestamp": "t", "summary": {"uploads": 0, "downloads": 1, "deletes": 0, "skips": 0, "total_size": 5}}
{"type": "comment", "text": "x"}
{"type": "operation", "action": "download", "path": "x.bin", "reason": "new file", "size": 5, "remote_mtime": "2026-12-06T09:30:00+00:00"}
"#;
        let p = read(hf).unwrap();
        assert_eq!(p.ops.len(), 1);
        assert_eq!(p.ops[0].action, Action::Download);
        assert!(matches!(read(""), Err(PlanFileError::Empty)));
        assert!(matches!(
            read(r#"{"type": "operation", "action": "skip", "path": "x"}"#),
            Err(PlanFileError::NoHeader)
        ));
        assert!(matches!(
            read(&format!(
                "{}{{\"type\": \"operation\", \"action\": \"explode\", \"path\": \"x\"}}\n",
                text
            )),
            Err(PlanFileError::Line { line: 4, .. })
        ));
    }
}
