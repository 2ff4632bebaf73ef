//! `tiervisor ctl volume`: create, grow, delete and list volumes of a running server.
//!
//! Requests are JSON, `{"cmd": "volume", "action": "create" | "resize" | "delete" |
//! "list", ...}`. A delete is refused while clients are connected to the volume, unless
//! `force` (the server then closes those connections: their requests in flight still
//! complete in the engine, their replies are dropped); the engine refuses new requests to
//! it, waits for those in flight, and the export goes once the tombstone is durable
//! (`EngineEvent::VolumeDeleted`); `list` shows it as `deleting` until then.
//! A resize goes through `Engine::control` too; the export takes the new size once the
//! engine says it is durable (`EngineEvent::VolumeResized`), and `list` shows the volume
//! as `resizing` until then. A create goes
//! through `Engine::control`; the volume is exported once the engine says it is durable
//! (`EngineEvent::VolumeCreated`), and `list` shows it as `creating` until then. A volume
//! made this way is recorded in the pools, not in the configuration file: it is mounted
//! and served at every start like the others.

use serde_json::{Value, json};
use tiervisor_engine::{Control, Engine, Outputs, Placement, Provisioning, VolumeConfig};

/// Answer one `volume` request.
pub fn volume(
    req: Option<&Value>,
    engine: &mut Engine,
    now: u64,
    out: &mut Outputs,
    server: &crate::server::ServerStats,
) -> Result<Value, String> {
    let req = req.ok_or("volume: expected a JSON request {\"cmd\": \"volume\", ...}")?;
    match req["action"].as_str().unwrap_or("list") {
        "list" => Ok(list(engine)),
        "create" => {
            let config = create_config(req, engine)?;
            let name = config.name.clone();
            engine
                .control(now, Control::CreateVolume { config }, out)
                .map_err(|e| format!("volume create: {name}: {e}"))?;
            Ok(json!({ "ok": true, "volume": name, "state": "creating" }))
        }
        "resize" => {
            let name = req["name"]
                .as_str()
                .ok_or("volume resize: expected \"name\": the volume to grow")?;
            let size_bytes = req["size_bytes"]
                .as_u64()
                .ok_or("volume resize: expected \"size_bytes\": the new size, a multiple of 512")?;
            let volume = engine.volume_id(name).ok_or_else(|| {
                format!("volume resize: no volume {name:?} (ctl volume list shows them)")
            })?;
            engine
                .control(now, Control::ResizeVolume { volume, size_bytes }, out)
                .map_err(|e| format!("volume resize: {e}"))?;
            Ok(json!({ "ok": true, "volume": name, "size_bytes": size_bytes, "state": "resizing" }))
        }
        "delete" => delete(req, engine, now, out, server),
        other => Err(format!(
            "volume: unknown action {other:?}; expected create, resize, delete or list"
        )),
    }
}

/// `name`, `force`: delete a volume (refused while clients are connected, unless forced).
fn delete(
    req: &Value,
    engine: &mut Engine,
    now: u64,
    out: &mut Outputs,
    server: &crate::server::ServerStats,
) -> Result<Value, String> {
    let name = req["name"]
        .as_str()
        .ok_or("volume delete: expected \"name\": the volume to delete")?;
    let force = req["force"].as_bool().unwrap_or(false);
    let volume = engine
        .volume_id(name)
        .ok_or_else(|| format!("volume delete: no volume {name:?} (ctl volume list shows them)"))?;
    let connected = (server.connections_per_export.iter())
        .find(|(n, _)| n == name)
        .map_or(0, |&(_, n)| n);
    if connected > 0 && !force {
        return Err(format!(
            "volume delete: {name} has {connected} client connection(s); disconnect them \
             first, or use --force to close them (their requests in flight still complete)"
        ));
    }
    engine
        .control(now, Control::DeleteVolume { volume }, out)
        .map_err(|e| format!("volume delete: {e}"))?;
    Ok(json!({
        "ok": true,
        "volume": name,
        "state": "deleting",
        "disconnect": connected > 0,
        "connections_closed": connected,
    }))
}

fn list(engine: &Engine) -> Value {
    let report = engine.report();
    let pool_name = |p: usize| {
        report
            .pools
            .get(p)
            .map_or("?".to_string(), |p| p.name.clone())
    };
    // By id: the report leaves out volumes deleted while running, whose ids stay taken.
    let mut vols: Vec<Value> = (0..engine.volumes().len())
        .map(|i| tiervisor_engine::VolumeId(i as u32))
        .filter_map(|id| engine.volume_report(id).map(|v| (id, v)))
        .map(|(id, v)| {
            json!({
                "name": v.name,
                "size_bytes": v.size_bytes,
                "pool": engine.volume_home_pool(id).map(|p| pool_name(p.0 as usize)),
                "provisioning": v.provisioning,
                "placement": v.placement,
                "state": if engine.volume_being_created() == Some(v.name.as_str()) {
                    "creating"
                } else if engine.volume_being_resized().is_some_and(|(r, _)| r == id) {
                    "resizing"
                } else if engine.volume_being_deleted() == Some(id) {
                    "deleting"
                } else {
                    "ready"
                },
            })
        })
        .collect();
    if let Some(name) = engine.volume_being_created()
        && !vols.iter().any(|v| v["name"] == name)
    {
        vols.push(json!({ "name": name, "state": "creating" }));
    }
    json!({ "volumes": vols })
}

/// `name`, `size_bytes`, `pool` (default: the first pool), `provisioning` (`thin`, the
/// default, or `thick`). Placement is `pinned`: tiered placements need their fast pool
/// and budgets, which the configuration file gives.
fn create_config(req: &Value, engine: &Engine) -> Result<VolumeConfig, String> {
    let name = req["name"]
        .as_str()
        .ok_or("volume create: expected \"name\": the new volume's name")?;
    let size_bytes = req["size_bytes"]
        .as_u64()
        .ok_or("volume create: expected \"size_bytes\": a positive multiple of 512")?;
    let pools = engine.report().pools;
    let home = match req["pool"].as_str() {
        None => 0,
        Some(p) => pools.iter().position(|q| q.name == p).ok_or_else(|| {
            let names: Vec<&str> = pools.iter().map(|q| q.name.as_str()).collect();
            format!(
                "volume create: no pool {p:?}; the pools are {}",
                names.join(", ")
            )
        })?,
    };
    let provisioning = match req["provisioning"].as_str().unwrap_or("thin") {
        "thin" => Provisioning::Thin,
        "thick" => Provisioning::Thick,
        other => {
            return Err(format!(
                "volume create: provisioning {other:?}; expected thin or thick"
            ));
        }
    };
    Ok(VolumeConfig {
        name: name.to_string(),
        size_bytes,
        home_pool: tiervisor_engine::PoolId(home as u16),
        fast_pool: None,
        provisioning,
        placement: Placement::Pinned,
        log: None,
        qos: Default::default(),
    })
}
