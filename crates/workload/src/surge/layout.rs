//! Files laid out on the disk with fragmentation, as seed 003 prepared its drives: fill
//! the disk with `files` files, delete half of them chosen at random, then write the
//! deleted half back with new sizes into the holes (next fit, a file split across holes
//! when it does not fit in one, the free tail after the last hole).

use rand::RngCore;

use super::dist::SizeMix;
use crate::r#gen::below;

/// File-system block: file sizes round up to it and extents start on it.
pub const FS_BLOCK_BYTES: u64 = 4096;

/// Every file's extents, flat: file `i` owns `extents[first[i]..first[i + 1]]`.
#[derive(Clone, Debug)]
pub struct Layout {
    first: Vec<u32>,
    extents: Vec<(u64, u64)>,
    /// Bytes from the region's start to the end of the last extent.
    pub used_bytes: u64,
}

impl Layout {
    /// Lay `files` files out in `region_bytes`; an error if they do not fit.
    pub fn build(
        rng: &mut impl RngCore,
        files: u64,
        region_bytes: u64,
        sizes: &SizeMix,
    ) -> Result<Layout, String> {
        let round = |b: u64| b.div_ceil(FS_BLOCK_BYTES) * FS_BLOCK_BYTES;
        // Fill: one contiguous extent per file.
        let mut per_file: Vec<Vec<(u64, u64)>> = Vec::with_capacity(files as usize);
        let mut cursor = 0u64;
        for _ in 0..files {
            let len = round(sizes.draw(rng));
            per_file.push(vec![(cursor, len)]);
            cursor += len;
        }
        // Delete half at random (a partial Fisher-Yates shuffle picks them).
        let mut ids: Vec<u64> = (0..files).collect();
        let half = files / 2;
        for i in 0..half {
            let j = i + below(rng, files - i);
            ids.swap(i as usize, j as usize);
        }
        let deleted = &mut ids[..half as usize];
        deleted.sort_unstable();
        let mut holes: Vec<(u64, u64)> = deleted
            .iter()
            .flat_map(|&f| std::mem::take(&mut per_file[f as usize]))
            .collect();
        holes.sort_unstable();
        // Add the deleted files back with new sizes, next fit through the holes.
        let mut h = 0usize;
        for &f in deleted.iter() {
            let mut need = round(sizes.draw(rng));
            let mut ext = Vec::new();
            while need > 0 {
                let (at, len) = if h < holes.len() {
                    holes[h]
                } else {
                    (cursor, need)
                };
                let take = need.min(len);
                match ext.last_mut() {
                    Some((s, l)) if *s + *l == at => *l += take,
                    _ => ext.push((at, take)),
                }
                need -= take;
                if h < holes.len() {
                    holes[h] = (at + take, len - take);
                    if take == len {
                        h += 1;
                    }
                } else {
                    cursor += take;
                }
            }
            per_file[f as usize] = ext;
        }
        if cursor > region_bytes {
            return Err(format!(
                "{files} files need {cursor} bytes but the region holds {region_bytes}; use fewer files or a larger volume"
            ));
        }
        let mut first = Vec::with_capacity(files as usize + 1);
        let mut extents = Vec::new();
        for e in per_file {
            first.push(extents.len() as u32);
            extents.extend(e);
        }
        first.push(extents.len() as u32);
        Ok(Layout {
            first,
            extents,
            used_bytes: cursor,
        })
    }

    pub fn files(&self) -> u64 {
        self.first.len() as u64 - 1
    }

    /// File `i`'s extents, (offset, length) in bytes, in file order.
    pub fn extents(&self, i: u64) -> &[(u64, u64)] {
        &self.extents[self.first[i as usize] as usize..self.first[i as usize + 1] as usize]
    }

    pub fn size_bytes(&self, i: u64) -> u64 {
        self.extents(i).iter().map(|e| e.1).sum()
    }

    /// Files stored in more than one extent.
    pub fn fragmented_files(&self) -> u64 {
        (0..self.files())
            .filter(|&i| self.extents(i).len() > 1)
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    #[test]
    fn extents_never_overlap_and_some_files_are_fragmented() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let l = Layout::build(&mut rng, 20_000, 1 << 40, &SizeMix::PAPER).unwrap();
        assert_eq!(l.files(), 20_000);
        let mut all: Vec<(u64, u64)> = (0..l.files()).flat_map(|i| l.extents(i).to_vec()).collect();
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlap {w:?}");
        }
        assert!(all.iter().all(|e| e.0 % FS_BLOCK_BYTES == 0 && e.1 > 0));
        assert_eq!(all.last().map(|e| e.0 + e.1), Some(l.used_bytes));
        // Half the files were rewritten into holes of other sizes: many are split.
        let frag = l.fragmented_files();
        assert!(frag > 1_000 && frag < 10_000, "{frag} fragmented files");
    }

    #[test]
    fn too_small_a_region_is_an_error() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let e = Layout::build(&mut rng, 10_000, 1 << 20, &SizeMix::PAPER).unwrap_err();
        assert!(e.contains("region holds"), "{e}");
    }
}
