//! `tiervisor ctl migrate`: the admin socket's live storage migration commands (seed 004).
//!
//! Requests are JSON, `{"cmd": "migrate", "action": A, "volume": NAME, ...}` with `A` one
//! of `start`, `status`, `set-rate`, `cancel`. Starts, rate changes and cancels go through
//! `Engine::control`; a refusal comes back as `{"error": ...}` with the engine's reason.

use serde_json::{Value, json};
use tiervisor_engine::jobs::migrate::{
    CopyPriority, MAX_COALESCE_RUNS, MAX_COPY_WINDOW_CHUNKS, MigrationParams, MigrationStatus,
    SchemeChoice,
};
use tiervisor_engine::{Control, Engine, Outputs, PoolId, VolumeId};

/// Answer one `migrate` request.
pub fn migrate(
    req: Option<&Value>,
    engine: &mut Engine,
    now: u64,
    out: &mut Outputs,
) -> Result<Value, String> {
    let req = req.ok_or("migrate: expected a JSON request {\"cmd\": \"migrate\", ...}")?;
    let action = req["action"].as_str().unwrap_or("status");
    if action == "status" {
        return status(req, engine, now);
    }
    let (name, id) = volume(req, engine)?;
    let control = match action {
        "start" => Control::StartMigration {
            volume: id,
            params: start_params(req, engine)?,
        },
        "set-rate" => Control::SetMigrationRate {
            volume: id,
            rate_bytes_per_s: rate(req)?.ok_or("migrate set-rate: expected \"rate_mb_s\"")?,
        },
        "cancel" => Control::CancelMigration { volume: id },
        other => {
            return Err(format!(
                "migrate: unknown action {other:?}; expected start, status, set-rate or cancel"
            ));
        }
    };
    engine
        .control(now, control, out)
        .map_err(|e| format!("migrate {action}: {name}: {e}"))?;
    let st = engine
        .migration_status(id)
        .ok_or_else(|| format!("migrate {action}: {name}: no migration status"))?;
    Ok(json!({ "ok": true, "migration": status_json(engine, now, &st) }))
}

fn volume(req: &Value, engine: &Engine) -> Result<(String, VolumeId), String> {
    let name = req["volume"]
        .as_str()
        .ok_or("migrate: expected \"volume\": a volume name")?;
    let id = engine
        .volume_id(name)
        .ok_or_else(|| format!("migrate: no volume {name:?}"))?;
    Ok((name.to_string(), id))
}

/// `rate_mb_s` (MB/s, as the scenarios' `[[migration]] rate_mb_s`) in bytes per second.
fn rate(req: &Value) -> Result<Option<u64>, String> {
    match &req["rate_mb_s"] {
        Value::Null => Ok(None),
        v => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 && x * 1e6 >= 1.0 => Ok(Some((x * 1e6) as u64)),
            _ => Err(format!(
                "migrate: rate {v} MB/s: expected a positive number"
            )),
        },
    }
}

fn start_params(req: &Value, engine: &Engine) -> Result<MigrationParams, String> {
    let to = req["to"]
        .as_str()
        .ok_or("migrate start: expected \"to\": a pool name")?;
    let pools = &engine.config().pools;
    let pool = pools.iter().position(|p| p.name == to).ok_or_else(|| {
        let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
        format!(
            "migrate start: no pool {to:?}; the pools are {}",
            names.join(", ")
        )
    })?;
    let mut p = MigrationParams::new(PoolId(pool as u16));
    if let Some(s) = req["scheme"].as_str() {
        p.scheme = SchemeChoice::parse(s).map_err(|e| format!("migrate start: {e}"))?;
    }
    if let Some(r) = rate(req)? {
        p.rate_bytes_per_s = r;
    }
    if let Some(c) = req["copy_priority"].as_str() {
        p.copy_priority = CopyPriority::parse(c).map_err(|e| format!("migrate start: {e}"))?;
    }
    let whole = |k: &str| -> Result<Option<u64>, String> {
        match &req[k] {
            Value::Null => Ok(None),
            v => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("migrate start: {k} = {v}: expected a whole number")),
        }
    };
    if let Some(g) = whole("granularity_bytes")? {
        p.granularity_bytes = g;
    }
    if let Some(b) = whole("buffer_bytes")? {
        p.buffer_bytes = b;
    }
    if let Some(n) = whole("dbt_max_passes")? {
        p.dbt_max_passes = u32::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("migrate start: dbt_max_passes = {n}: expected 1 or more"))?;
    }
    if let Some(n) = whole("copy_window_chunks")? {
        p.copy_window_chunks = u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_COPY_WINDOW_CHUNKS).contains(n))
            .ok_or_else(|| {
                format!(
                    "migrate start: copy_window_chunks = {n}: expected 1 to {MAX_COPY_WINDOW_CHUNKS}"
                )
            })?;
    }
    if let Some(n) = whole("coalesce_runs")? {
        p.coalesce_runs = Some(
            u32::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_COALESCE_RUNS)
                .ok_or_else(|| {
                    format!(
                        "migrate start: coalesce_runs = {n}: expected 0 (never) to {MAX_COALESCE_RUNS}"
                    )
                })?,
        );
    }
    match &req["gamma"] {
        Value::Null => {}
        v => {
            p.gamma = v
                .as_f64()
                .ok_or_else(|| format!("migrate start: gamma {v}: expected a number"))?;
        }
    }
    Ok(p)
}

/// `status` of one volume (`"volume"` given) or of every volume that has migrated.
fn status(req: &Value, engine: &Engine, now: u64) -> Result<Value, String> {
    let all = if req["volume"].is_null() {
        engine.migrations()
    } else {
        let (name, id) = volume(req, engine)?;
        vec![
            engine
                .migration_status(id)
                .ok_or_else(|| format!("migrate status: volume {name} has not migrated"))?,
        ]
    };
    Ok(json!({ "migrations": all.iter().map(|m| status_json(engine, now, m)).collect::<Vec<_>>() }))
}

/// Every volume's running or last migration (for `ctl stat` and `migrate status`).
pub fn migrations_json(engine: &Engine, now: u64) -> Value {
    Value::Array(
        engine
            .migrations()
            .iter()
            .map(|m| status_json(engine, now, m))
            .collect(),
    )
}

fn pool_name(engine: &Engine, p: PoolId) -> String {
    engine
        .config()
        .pools
        .get(p.0 as usize)
        .map_or_else(|| format!("#{}", p.0), |c| c.name.clone())
}

/// One job's status, with the seed's metrics the engine keeps.
pub fn status_json(engine: &Engine, now: u64, m: &MigrationStatus) -> Value {
    let cb = engine.config().chunk_bytes;
    let s = &m.stats;
    let end = s.finished_ns.unwrap_or(now);
    let over = m.phase.is_over();
    let left_bytes = (m.chunks - m.chunks_done) * cb;
    let cost = m.cost();
    let eta_s = (!over).then(|| left_bytes as f64 / m.rate_bytes_per_s.max(1) as f64);
    let pass = match m.phase {
        tiervisor_engine::jobs::migrate::MigrationPhase::Copying { pass } => pass,
        _ => s.pass,
    };
    json!({
        "volume": m.volume,
        "from": m.from.iter().map(|&p| pool_name(engine, p)).collect::<Vec<_>>(),
        "to": pool_name(engine, m.to),
        "scheme": m.scheme.name(),
        "why": m.why,
        "phase": m.phase.name(),
        "running": !over,
        "pass": pass,
        "chunks": m.chunks,
        "chunks_done": m.chunks_done,
        "chunks_copied": s.chunks_copied,
        "percent_copied": m.percent_copied(),
        "image_bytes": m.chunks * cb,
        "image_bytes_done": m.chunks_done * cb,
        "copied_bytes": s.copied_bytes,
        "dirty_bytes": s.dirty_bytes,
        "redundant_bytes": s.redundant_bytes,
        "mirrored_bytes": s.mirrored_bytes,
        "vm_write_bytes": s.vm_write_bytes,
        "ssd_write_bytes": s.ssd_write_bytes,
        "rate_bytes_per_s": m.rate_bytes_per_s,
        "copy_priority": m.copy_priority.name(),
        "copy_window_chunks": m.copy_window_chunks,
        "coalesce_runs": m.coalesce_runs,
        "whole_chunk_copies": s.whole_chunk_copies,
        "elapsed_s": end.saturating_sub(s.started_ns) as f64 / 1e9,
        "image_copy_s": s.image_copied_ns.map(|t| t.saturating_sub(s.started_ns) as f64 / 1e9),
        "eta_s": eta_s,
        "downtime_ms": s.downtime_ns as f64 / 1e6,
        "pivot_durable_ms": s.pivot_durable_ns as f64 / 1e6,
        "gamma": m.gamma,
        "lambda_io": cost.map(|c| c.lambda_io),
        "lambda_migration_time": cost.map(|c| c.lambda_migration_time),
        "lambda_wear": cost.map(|c| c.lambda_wear),
        "mc": cost.map(|c| c.mc),
        "error": m.error,
    })
}

/// One line per migration for `ctl stat` and `ctl migrate status` (from `status_json`).
pub fn status_line(m: &Value) -> String {
    let mib = |k: &str| m[k].as_f64().unwrap_or(0.0) / 1048576.0;
    let mut line = format!(
        "{} -> {} ({}): {} pass {}, {:.1} of {:.1} MiB done ({:.0} %, {} chunk(s) copied), {:.1} MiB dirty, {:.1} MiB redundant, {:.1} s elapsed, rate {:.1} MB/s",
        m["volume"].as_str().unwrap_or("?"),
        m["to"].as_str().unwrap_or("?"),
        m["scheme"].as_str().unwrap_or("?"),
        m["phase"].as_str().unwrap_or("?"),
        m["pass"],
        mib("image_bytes_done"),
        mib("image_bytes"),
        m["percent_copied"].as_f64().unwrap_or(0.0),
        m["chunks_copied"],
        mib("dirty_bytes"),
        mib("redundant_bytes"),
        m["elapsed_s"].as_f64().unwrap_or(0.0),
        m["rate_bytes_per_s"].as_f64().unwrap_or(0.0) / 1e6,
    );
    if let Some(prio) = m["copy_priority"].as_str() {
        line += &format!(", copy priority {prio}");
    }
    // The window bounds DBT's copies only (the other schemes copy one chunk at a time).
    if m["scheme"] == "dbt" {
        line += &format!(", window {} chunk(s)", m["copy_window_chunks"]);
        match m["coalesce_runs"].as_u64() {
            Some(0) | None => line += ", no whole-chunk copies",
            Some(n) => {
                line += &format!(
                    ", whole chunk from {n} dirty runs ({} so far)",
                    m["whole_chunk_copies"]
                )
            }
        }
    }
    if let Some(eta) = m["eta_s"].as_f64() {
        line += &format!(", ETA {eta:.1} s at the rate cap");
    }
    if m["phase"] == "done" {
        line += &format!(
            ", pivot downtime {:.2} ms (switch durable after {:.2} ms)",
            m["downtime_ms"].as_f64().unwrap_or(0.0),
            m["pivot_durable_ms"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(mc) = m["mc"].as_f64() {
        let f = |k: &str| m[k].as_f64().unwrap_or(0.0);
        line += &format!(
            ", lambda_IO {:.2}, lambda_time {:.2}, lambda_wear {:.2}, MC {mc:.3} at gamma {:.2}",
            f("lambda_io"),
            f("lambda_migration_time"),
            f("lambda_wear"),
            f("gamma")
        );
    }
    if let Some(e) = m["error"].as_str() {
        line += &format!("; error: {e}");
    }
    line
}
