//! `oncegate canon`: the canonical bytes of a document, or of each line of a JSON Lines stream.

use anyhow::{Context, Result};
use oncegate_core::canon::to_jcs;
use oncegate_core::json::{parse, Limits};
use std::io::{BufRead, Read, Write};

use crate::exit::Status;

pub fn run(lines: bool) -> Result<Status> {
    let stdin = std::io::stdin();
    let mut out = crate::output::stdout();
    // A canon run is an offline tool: allow bodies far larger than a webhook limit.
    let limits = Limits {
        max_bytes: usize::MAX,
        ..Limits::default()
    };
    if !lines {
        let mut body = Vec::new();
        stdin
            .lock()
            .read_to_end(&mut body)
            .context("reading stdin")?;
        let doc =
            parse(&body, &limits).map_err(|e| anyhow::anyhow!("stdin is not accepted: {e}"))?;
        out.write_all(to_jcs(&doc).as_bytes())?;
        out.write_all(b"\n")?;
        return Ok(Status::Success);
    }
    let mut failed = 0usize;
    let mut input = stdin.lock();
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .context("reading stdin")?
            == 0
        {
            break;
        }
        number += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        match parse(text, &limits) {
            Ok(doc) => writeln!(out, "{}", to_jcs(&doc))?,
            Err(e) => {
                failed += 1;
                writeln!(
                    out,
                    "{{\"error\":{{\"line\":{number},\"message\":{}}}}}",
                    to_jcs(&oncegate_core::json::Value::String(e.to_string()))
                )?;
            }
        }
    }
    out.flush()?;
    if failed > 0 {
        errln!("oncegate: {failed} of {number} lines were not accepted");
        return Ok(Status::Found);
    }
    Ok(Status::Success)
}
