//! A scenario VM's workload, built the same way for the simulator and for
//! `tiervisor load` (which replays it against a real NBD export), so that one definition
//! can be predicted in simulation and checked for real.

use tiervisor_workload::{
    AppWorkload, BenchWorkload, FioWorkload, GuestCommit, HostJournal, HostPath, SpcWorkload,
    SurgeWorkload, TraceWorkload, Workload,
};

use crate::scenario::{VmSpec, WorkloadSpec};

/// Where a guest's timer commits journal: the last 32 MiB of its volume (as varmail's
/// fsyncs do; a whole-volume fio job shares it, which only the data, never the timing,
/// would notice).
const GUEST_JOURNAL_BYTES: u64 = 32 << 20;

impl VmSpec {
    /// [`WorkloadSpec::build`], with the guest's journal commit timer if it has one.
    pub fn build(
        &self,
        vol_bytes: u64,
        seed: u64,
        vm_index: usize,
    ) -> Result<(Box<dyn Workload + Send>, Option<u64>), String> {
        let (w, n) = self.workload.build(vol_bytes, seed, vm_index)?;
        // The host path takes what the guest (and its commit timer) send.
        let (w, n) = self.with_commit(w, n, vol_bytes);
        Ok(if self.host.is_direct() {
            (w, n)
        } else {
            // Writeback changes the number of requests.
            (Box::new(HostPath::new(w, self.host.clone())), None)
        })
    }

    fn with_commit(
        &self,
        w: Box<dyn Workload + Send>,
        n: Option<u64>,
        vol_bytes: u64,
    ) -> (Box<dyn Workload + Send>, Option<u64>) {
        match self.guest_commit_ns {
            Some(every) => {
                let journal = GUEST_JOURNAL_BYTES.min(vol_bytes);
                let w = GuestCommit::new(w, every, vol_bytes - journal, journal);
                // The commits add requests: the count is no longer known.
                (Box::new(w), None)
            }
            None => (w, n),
        }
    }
}

impl WorkloadSpec {
    /// The generator for VM number `vm_index` of a run with `seed` on a volume of
    /// `vol_bytes`, and how many requests it will make if that is known.
    pub fn build(
        &self,
        vol_bytes: u64,
        seed: u64,
        vm_index: usize,
    ) -> Result<(Box<dyn Workload + Send>, Option<u64>), String> {
        // Each VM's generator gets its own stream derived from the run's seed.
        let vm_seed = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(vm_index as u64 + 1);
        Ok(match self {
            WorkloadSpec::Trace {
                trace,
                devices,
                mode,
                repeat,
            } => {
                let w = TraceWorkload::new(trace.clone(), devices, *mode, *repeat, vol_bytes);
                let n = w.len();
                (Box::new(w), Some(n))
            }
            WorkloadSpec::Surge(cfg) => {
                let mut cfg = cfg.clone();
                cfg.seed = vm_seed;
                let n = cfg.requests;
                (Box::new(SurgeWorkload::new(cfg)?), Some(n))
            }
            WorkloadSpec::App(job) => {
                let mut job = job.clone();
                job.seed = vm_seed;
                (Box::new(AppWorkload::new(job)), None)
            }
            WorkloadSpec::Bench(job) => {
                let mut job = job.clone();
                job.seed = vm_seed;
                (Box::new(BenchWorkload::new(job)), None)
            }
            WorkloadSpec::Spc(job) => {
                let mut job = job.clone();
                job.seed = vm_seed;
                let w = SpcWorkload::new(job);
                let n = w.requests();
                (Box::new(w), n)
            }
            WorkloadSpec::HostJournal(job) => {
                let w = HostJournal::new(job.commit_ns, job.runtime_ns, vol_bytes);
                (Box::new(w), None)
            }
            WorkloadSpec::Fio(job) => {
                let mut job = job.clone();
                job.seed = vm_seed;
                let n = job.ios;
                (Box::new(FioWorkload::new(job)), n)
            }
        })
    }
}
