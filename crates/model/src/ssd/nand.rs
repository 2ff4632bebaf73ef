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
        }
    }

    #[inline]
    fn channel_of(&self, die: usize) -> usize {
        die / self.dies_per_channel
    }

    /// Array read then transfer out over the channel; returns when the data is in the controller.
    #[inline]
    pub fn read_page(&mut self, t: u64, die: usize) -> u64 {
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
        let start = t.max(self.die_free_ns[die]);
        let done = start + pages * (self.read_ns + self.program_ns) + erases * self.erase_ns;
        self.die_free_ns[die] = done;
        self.counters.media_read_bytes += pages * self.page_bytes;
        self.counters.media_write_bytes += pages * self.page_bytes;
        self.counters.gc_page_copies += pages;
        self.counters.erases += erases;
        done
    }
}
