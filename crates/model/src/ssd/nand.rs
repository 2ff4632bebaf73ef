//! NAND resources on a timeline: per-die array time and per-channel bus time.

use crate::DeviceCounters;
use crate::units::transfer_ns;

#[derive(Clone, Debug)]
pub(crate) struct Nand {
    pub dies: usize,
    dies_per_channel: usize,
    pub page_bytes: u64,
    read_ns: u64,
    program_ns: u64,
    erase_ns: u64,
    page_xfer_ns: u64,
    die_free_ns: Vec<u64>,
    channel_free_ns: Vec<u64>,
    pub counters: DeviceCounters,
    /// While a FLUSH is served: the same operations on dies and channels that were all
    /// idle when it started, to tell its own service time from waiting for earlier work.
    shadow: Option<Shadow>,
}

/// What a FLUSH's operation is for (its completion on the idle shadow is kept per kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Buffered data (and the read of a partial page's rest, and any GC it triggers).
    Data,
    /// Translation pages written because a mapping-log area filled.
    LogFill,
    /// The FLUSH's own mapping pages: dirty translation pages, or its tag's log page.
    Map,
}

#[derive(Clone, Debug)]
struct Shadow {
    die_free_ns: Vec<u64>,
    channel_free_ns: Vec<u64>,
    work: Work,
    /// Latest completion on the shadow per [`Work`] (0: none).
    done_ns: [u64; 3],
    t0_ns: u64,
    /// How much later the real drive issues the current operations than the idle one
    /// would (the map pages wait for the data, which ends later on the real drive).
    lag_ns: u64,
}

impl Shadow {
    fn note(&mut self, done_ns: u64) {
        let i = self.work as usize;
        self.done_ns[i] = self.done_ns[i].max(done_ns);
    }
}

impl Nand {
    pub fn new(
        channels: usize,
        dies_per_channel: usize,
        page_bytes: u64,
        read_ns: u64,
        program_ns: u64,
        erase_ns: u64,
        channel_bytes_per_sec: u64,
    ) -> Nand {
        let dies = channels * dies_per_channel;
        Nand {
            dies,
            dies_per_channel,
            page_bytes,
            read_ns,
            program_ns,
            erase_ns,
            page_xfer_ns: transfer_ns(page_bytes, channel_bytes_per_sec),
            die_free_ns: vec![0; dies],
            channel_free_ns: vec![0; channels],
            counters: DeviceCounters::default(),
            shadow: None,
        }
    }

    /// Start timing a FLUSH's operations on idle dies and channels from `t0`.
    pub fn shadow_begin(&mut self, t0: u64) {
        self.shadow = Some(Shadow {
            die_free_ns: vec![t0; self.die_free_ns.len()],
            channel_free_ns: vec![t0; self.channel_free_ns.len()],
            work: Work::Data,
            done_ns: [0; 3],
            t0_ns: t0,
            lag_ns: 0,
        });
    }

    /// The FLUSH's mapping pages come next, issued at `real_start_ns` (when its data is on
    /// flash on the real drive); on the idle drive they start when its data ended there.
    pub fn shadow_map_after(&mut self, real_start_ns: u64) {
        if let Some(s) = self.shadow.as_mut() {
            let idle_start = s.t0_ns.max(s.done_ns[0]).max(s.done_ns[1]);
            s.lag_ns = real_start_ns.saturating_sub(idle_start);
            s.work = Work::Map;
        }
    }

    /// What the next operations are for; returns what they were for (to restore).
    pub fn shadow_work(&mut self, work: Work) -> Work {
        match self.shadow.as_mut() {
            Some(s) => std::mem::replace(&mut s.work, work),
            None => work,
        }
    }

    /// Stop the shadow; returns the latest idle-drive completion per [`Work`] (data,
    /// log fill, map; 0 where there was none).
    pub fn shadow_end(&mut self) -> [u64; 3] {
        self.shadow.take().map_or([0; 3], |s| s.done_ns)
    }

    fn shadow_read(&mut self, t: u64, die: usize) {
        let ch = self.channel_of(die);
        let (read_ns, xfer_ns) = (self.read_ns, self.page_xfer_ns);
        if let Some(s) = self.shadow.as_mut() {
            let t = t.saturating_sub(s.lag_ns);
            let sensed = t.max(s.die_free_ns[die]) + read_ns;
            s.die_free_ns[die] = sensed;
            let xfer = sensed.max(s.channel_free_ns[ch]);
            s.channel_free_ns[ch] = xfer + xfer_ns;
            s.note(xfer + xfer_ns);
        }
    }

    fn shadow_program(&mut self, t: u64, die: usize) {
        let ch = self.channel_of(die);
        let (program_ns, xfer_ns) = (self.program_ns, self.page_xfer_ns);
        if let Some(s) = self.shadow.as_mut() {
            let t = t.saturating_sub(s.lag_ns);
            let xfer = t.max(s.channel_free_ns[ch]);
            s.channel_free_ns[ch] = xfer + xfer_ns;
            let start = (xfer + xfer_ns).max(s.die_free_ns[die]);
            s.die_free_ns[die] = start + program_ns;
            s.note(start + program_ns);
        }
    }

    #[inline]
    fn channel_of(&self, die: usize) -> usize {
        die / self.dies_per_channel
    }

    /// Array read then transfer out over the channel; returns when the data is in the controller.
    #[inline]
    pub fn read_page(&mut self, t: u64, die: usize) -> u64 {
        self.shadow_read(t, die);
        let start = t.max(self.die_free_ns[die]);
        let sensed = start + self.read_ns;
        self.die_free_ns[die] = sensed;
        let ch = self.channel_of(die);
        let xfer = sensed.max(self.channel_free_ns[ch]);
        self.channel_free_ns[ch] = xfer + self.page_xfer_ns;
        self.counters.media_read_bytes += self.page_bytes;
        xfer + self.page_xfer_ns
    }

    /// Transfer in over the channel then program; returns when the page is on flash.
    #[inline]
    pub fn program_page(&mut self, t: u64, die: usize) -> u64 {
        self.shadow_program(t, die);
        let ch = self.channel_of(die);
        let xfer = t.max(self.channel_free_ns[ch]);
        self.channel_free_ns[ch] = xfer + self.page_xfer_ns;
        let start = (xfer + self.page_xfer_ns).max(self.die_free_ns[die]);
        self.die_free_ns[die] = start + self.program_ns;
        self.counters.media_write_bytes += self.page_bytes;
        start + self.program_ns
    }

    /// Copy `pages` valid pages inside a die (copy-back) and erase `erases` blocks.
    #[inline]
    pub fn die_work(&mut self, t: u64, die: usize, pages: u64, erases: u64) -> u64 {
        let work_ns = pages * (self.read_ns + self.program_ns) + erases * self.erase_ns;
        if let Some(s) = self.shadow.as_mut() {
            let t = t.saturating_sub(s.lag_ns);
            let done = t.max(s.die_free_ns[die]) + work_ns;
            s.die_free_ns[die] = done;
            s.note(done);
        }
        let start = t.max(self.die_free_ns[die]);
        let done = start + work_ns;
        self.die_free_ns[die] = done;
        self.counters.media_read_bytes += pages * self.page_bytes;
        self.counters.media_write_bytes += pages * self.page_bytes;
        self.counters.gc_page_copies += pages;
        self.counters.erases += erases;
        done
    }
}
