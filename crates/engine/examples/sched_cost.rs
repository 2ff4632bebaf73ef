//! CPU cost of each scheduler per dispatch at a fixed queue depth: the queue is filled to
//! the depth, then each step dispatches one request, completes it and adds a new one
//! (random volume of 4, random offset on a 73 GB disk), so the depth stays constant.
//! Reports the median over `--reps` runs of ns per step (add + dispatch + complete).
//! Virtual time advances 100 us per step, and jumps to any `WaitUntil` a scheduler asks.
//!
//! Run: cargo run --release -p tiervisor-engine --example sched_cost -- [--reps 5] [--steps 200000]

use std::hint::black_box;
use std::time::Instant;

use tiervisor_engine::sched::{Dispatch, QueuedOp, SchedSpec, names};
use tiervisor_engine::types::{IoClass, IoContext};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: expected an integer, got {v}"))
        })
        .unwrap_or(default)
}

/// xorshift64*: a fixed stream so every scheduler sees the same requests.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn run(name: &str, depth: usize, steps: u64) -> f64 {
    let mut s = SchedSpec::named(name)
        .build()
        .expect("registered scheduler");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut now = 0u64;
    let mut key = 0usize;
    let mut new_op = |now: u64, rng: &mut Rng| {
        key += 1;
        let r = rng.next();
        QueuedOp {
            key,
            offset_bytes: (r % 143_000_000) * 512,
            len_bytes: 4096,
            is_write: r >> 60 < 4,
            class: IoClass::Foreground,
            volume: (r >> 56 & 3) as u32,
            context: IoContext::Volume,
            arrival_ns: now,
        }
    };
    for _ in 0..depth {
        let op = new_op(now, &mut rng);
        s.add(now, op);
    }
    let t = Instant::now();
    for _ in 0..steps {
        now += 100_000;
        let op = loop {
            match s.dispatch(now) {
                Dispatch::Op(o) => break o,
                Dispatch::WaitUntil(t) => now = t.max(now + 1),
                Dispatch::Idle => panic!("{name}: idle with {} queued", s.len()),
            }
        };
        s.completed(now, black_box(&op));
        let next = new_op(now, &mut rng);
        s.add(now, next);
    }
    t.elapsed().as_nanos() as f64 / steps as f64
}

fn main() {
    let reps = arg("--reps", 5);
    let steps = arg("--steps", 200_000);
    println!(
        "{:10} {:>16} {:>16}",
        "scheduler", "ns/dispatch @32", "ns/dispatch @256"
    );
    for name in names() {
        let mut row = Vec::new();
        for depth in [32, 256] {
            let mut v: Vec<f64> = (0..reps).map(|_| run(name, depth, steps)).collect();
            v.sort_by(f64::total_cmp);
            row.push(v[v.len() / 2]);
        }
        println!("{name:10} {:16.0} {:16.0}", row[0], row[1]);
    }
}
