//! `tiervisor ctl volume`: create, grow, delete and list volumes of a running server.

use std::time::{Duration, Instant};

use clap::Subcommand;
use serde_json::{Value, json};

use crate::Failure;
use crate::cmd_ctl_migrate::ask;
use crate::cmd_serve::Target;

#[derive(Subcommand)]
pub enum VolumeCmd {
    /// Create a volume while the server runs; it is exported once it is durable (with
    /// --wait, this command returns then). It is recorded in the pools, not in the
    /// configuration file, and is served at every start like the others.
    Create {
        /// The new volume's (export's) name.
        name: String,
        /// Its size (e.g. 10g), a multiple of 512 bytes.
        #[arg(long)]
        size: String,
        /// The pool its chunks go to (default: the first pool).
        #[arg(long)]
        pool: Option<String>,
        /// Reserve all its space now (a contiguous, zeroed region) instead of on first write.
        #[arg(long)]
        thick: bool,
        /// Wait until it is exported (at most 60 s).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Grow a thin volume while the server runs. The new size is served once the volume
    /// table recording it is durable (with --wait, this command returns then); clients
    /// already connected keep the size they negotiated until they reconnect. Shrinking
    /// and thick volumes are refused. Set the new size in the configuration file too
    /// (until then the server warns at start and keeps the bigger size).
    Resize {
        /// The volume (export) to grow.
        name: String,
        /// Its new size (e.g. 20g), a multiple of 512 bytes, bigger than now.
        #[arg(long)]
        size: String,
        /// Wait until the new size is served (at most 60 s).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a volume while the server runs: its data is gone for good. Refused while
    /// clients are connected to it, unless --force (which closes those connections; their
    /// requests in flight still complete). It is gone once the volume table recording the
    /// deletion is durable (with --wait, this command returns then); its space is given
    /// back. A volume the configuration file still names is not created again at the
    /// next start (the server warns): remove it from the file too.
    Delete {
        /// The volume (export) to delete.
        name: String,
        /// Close the connections to it first.
        #[arg(long)]
        force: bool,
        /// Wait until it is gone (at most 60 s).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Every volume: name, size, pool, provisioning, placement, and whether it is ready.
    List {
        #[command(flatten)]
        target: Target,
    },
}

pub fn run(cmd: VolumeCmd) -> Result<(), Failure> {
    match cmd {
        VolumeCmd::Create {
            name,
            size,
            pool,
            thick,
            wait,
            target,
        } => {
            let size_bytes = size_arg(&size)?;
            let req = json!({
                "cmd": "volume",
                "action": "create",
                "name": name,
                "size_bytes": size_bytes,
                "pool": pool,
                "provisioning": if thick { "thick" } else { "thin" },
            });
            let answer = ask(&target, req)?;
            if !wait {
                let text =
                    format!("{name}: being created (ctl volume list shows when it is ready)");
                started(&target, &answer, &text);
                return Ok(());
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let v = list(&target)?;
                match state_of(&v, &name) {
                    Some("ready") => {
                        if target.json {
                            let entry = v["volumes"]
                                .as_array()
                                .and_then(|a| a.iter().find(|x| x["name"] == name.as_str()));
                            println!("{}", entry.unwrap_or(&Value::Null));
                        } else {
                            println!("{name}: created and exported");
                        }
                        return Ok(());
                    }
                    Some(_) if Instant::now() < deadline => {}
                    Some(_) => {
                        return Err(Failure::run(format!(
                            "{name}: still being created after 60 s"
                        )));
                    }
                    // Gone: the creation failed; the server's log says why.
                    None => {
                        return Err(Failure::run(format!(
                            "{name}: the creation failed (the server's log says why)"
                        )));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        VolumeCmd::Resize {
            name,
            size,
            wait,
            target,
        } => {
            let size_bytes = size_arg(&size)?;
            let req = json!({
                "cmd": "volume",
                "action": "resize",
                "name": name,
                "size_bytes": size_bytes,
            });
            let answer = ask(&target, req)?;
            if !wait {
                let text = format!(
                    "{name}: growing to {size_bytes} bytes (ctl volume list shows when it is done)"
                );
                started(&target, &answer, &text);
                return Ok(());
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let v = list(&target)?;
                let entry = v["volumes"]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x["name"] == name.as_str()))
                    .cloned()
                    .unwrap_or(Value::Null);
                if entry["state"] == "ready" && entry["size_bytes"] == size_bytes {
                    if target.json {
                        println!("{entry}");
                    } else {
                        println!("{name}: now {size_bytes} bytes");
                    }
                    return Ok(());
                }
                if entry["state"] != "resizing" && entry["size_bytes"] != size_bytes {
                    return Err(Failure::run(format!(
                        "{name}: the resize did not take effect (the server's log says why)"
                    )));
                }
                if Instant::now() >= deadline {
                    return Err(Failure::run(format!(
                        "{name}: still being resized after 60 s"
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        VolumeCmd::Delete {
            name,
            force,
            wait,
            target,
        } => {
            let req = json!({
                "cmd": "volume",
                "action": "delete",
                "name": name,
                "force": force,
            });
            let answer = ask(&target, req)?;
            if !wait {
                let text = format!("{name}: being deleted (ctl volume list shows when it is gone)");
                started(&target, &answer, &text);
                return Ok(());
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let v = list(&target)?;
                match state_of(&v, &name) {
                    None => {
                        if target.json {
                            println!(
                                "{}",
                                json!({ "ok": true, "volume": name, "state": "deleted" })
                            );
                        } else {
                            println!("{name}: deleted");
                        }
                        return Ok(());
                    }
                    Some(_) if Instant::now() < deadline => {}
                    Some(_) => {
                        return Err(Failure::run(format!(
                            "{name}: still being deleted after 60 s (requests or buffered \
                             writes in flight; ctl volume list shows its state)"
                        )));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        VolumeCmd::List { target } => {
            let v = list(&target)?;
            if target.json {
                println!("{}", v["volumes"]);
                return Ok(());
            }
            println!(
                "{:<24} {:>14} {:<10} {:<6} {:<8} state",
                "volume", "bytes", "pool", "prov", "place"
            );
            for x in v["volumes"].as_array().into_iter().flatten() {
                let s = |k: &str| x[k].as_str().unwrap_or("-").to_string();
                println!(
                    "{:<24} {:>14} {:<10} {:<6} {:<8} {}",
                    s("name"),
                    x["size_bytes"]
                        .as_u64()
                        .map_or("-".into(), |b| b.to_string()),
                    s("pool"),
                    s("provisioning"),
                    s("placement"),
                    s("state")
                );
            }
            Ok(())
        }
    }
}

fn size_arg(size: &str) -> Result<u64, Failure> {
    tiervisor_conf::parse_size(size).map_err(|e| Failure::input(format!("--size {size}: {e}")))
}

/// A command that returns without waiting: the server's answer (`--json`) or `text`.
fn started(target: &Target, answer: &Value, text: &str) {
    if target.json {
        println!("{answer}");
    } else {
        println!("{text}");
    }
}

fn list(target: &Target) -> Result<Value, Failure> {
    ask(target, json!({"cmd": "volume", "action": "list"}))
}

fn state_of<'a>(v: &'a Value, name: &str) -> Option<&'a str> {
    v["volumes"]
        .as_array()?
        .iter()
        .find(|x| x["name"] == name)?["state"]
        .as_str()
}
