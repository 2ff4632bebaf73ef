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
    /// Grow or shrink a thin volume while the server runs. A bigger size is served once
    /// the volume table recording it is durable; a smaller one at once, and recorded after
    /// a checkpoint (with --wait, this command returns once it is durable). Shrinking is
    /// refused while anything past the new end is written (trim it first) or in flight.
    /// Clients already connected keep the size they negotiated until they reconnect.
    /// Thick volumes are refused. Set the new size in the configuration file too: a
    /// configured size bigger than the volume's grows it at the next start.
    Resize {
        /// The volume (export) to resize.
        name: String,
        /// Its new size (e.g. 20g), a multiple of 512 bytes.
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
            if !send(&target, req, wait, || {
                format!("{name}: being created (ctl volume list shows when it is ready)")
            })? {
                return Ok(());
            }
            wait_for(&target, &name, "being created", |entry| match entry {
                Some(x) if x["state"] == "ready" => {
                    Wait::Done(x.clone(), format!("{name}: created and exported"))
                }
                Some(_) => Wait::Pending,
                // Gone: the creation failed; the server's log says why.
                None => Wait::Failed(format!(
                    "{name}: the creation failed (the server's log says why)"
                )),
            })
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
            if !send(&target, req, wait, || {
                format!(
                    "{name}: resizing to {size_bytes} bytes (ctl volume list shows when it is done)"
                )
            })? {
                return Ok(());
            }
            wait_for(&target, &name, "being resized", |entry| {
                let entry = entry.cloned().unwrap_or(Value::Null);
                if entry["state"] == "ready" && entry["size_bytes"] == size_bytes {
                    Wait::Done(entry, format!("{name}: now {size_bytes} bytes"))
                } else if entry["state"] != "resizing" && entry["size_bytes"] != size_bytes {
                    Wait::Failed(format!(
                        "{name}: the resize did not take effect (the server's log says why)"
                    ))
                } else {
                    Wait::Pending
                }
            })
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
            if !send(&target, req, wait, || {
                format!("{name}: being deleted (ctl volume list shows when it is gone)")
            })? {
                return Ok(());
            }
            wait_for(&target, &name, "being deleted", |entry| match entry {
                None => Wait::Done(
                    json!({ "ok": true, "volume": name, "state": "deleted" }),
                    format!("{name}: deleted"),
                ),
                Some(_) => Wait::Pending,
            })
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

/// Send a change; without `wait`, print the server's answer (`--json`) or `text` and say
/// so (false: nothing more to do).
fn send(
    target: &Target,
    req: Value,
    wait: bool,
    text: impl FnOnce() -> String,
) -> Result<bool, Failure> {
    let answer = ask(target, req)?;
    if !wait {
        if target.json {
            println!("{answer}");
        } else {
            println!("{}", text());
        }
    }
    Ok(wait)
}

fn list(target: &Target) -> Result<Value, Failure> {
    ask(target, json!({"cmd": "volume", "action": "list"}))
}

/// What a `--wait` sees in `ctl volume list`.
enum Wait {
    /// Done: the JSON (`--json`) or the text to print.
    Done(Value, String),
    Pending,
    Failed(String),
}

/// Poll `ctl volume list` every 20 ms, for at most 60 s, until `check` (given the volume's
/// entry, or `None` when it is not listed) says the change is done or failed.
fn wait_for(
    target: &Target,
    name: &str,
    doing: &str,
    check: impl Fn(Option<&Value>) -> Wait,
) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = list(target)?;
        let entry = (v["volumes"].as_array()).and_then(|a| a.iter().find(|x| x["name"] == name));
        match check(entry) {
            Wait::Done(json, text) => {
                if target.json {
                    println!("{json}");
                } else {
                    println!("{text}");
                }
                return Ok(());
            }
            Wait::Failed(why) => return Err(Failure::run(why)),
            Wait::Pending if Instant::now() >= deadline => {
                return Err(Failure::run(format!("{name}: still {doing} after 60 s")));
            }
            Wait::Pending => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
