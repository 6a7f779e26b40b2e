//! Loading a chain of images: DIR/checkpoint.rrc, then DIR/parent/... up to
//! the full image, checking each link (parent_id and sequence) and that
//! every page an image leaves to its ancestors is found in one of them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::ImageError;
use crate::image::{Image, VerifyPages};
use crate::{IMAGE_FILE_NAME, PAGE_SIZE, PARENT_LINK};

/// Longest chain accepted (protects against a cycle of symlinks that
/// also forges ids).
const MAX_CHAIN: usize = 100_000;

/// A verified chain, oldest (the full image) first.
#[derive(Debug, Clone)]
pub struct Chain {
    pub images: Vec<Image>,
    /// The directory of each image, same order.
    pub dirs: Vec<PathBuf>,
}

impl Chain {
    /// Loads and verifies the chain ending at `dir`: every CRC including
    /// page data, every link, every page lookup.
    pub fn load(dir: &Path) -> Result<Chain, ImageError> {
        Chain::load_with(dir, VerifyPages::Yes)
    }

    pub fn load_with(dir: &Path, verify_pages: VerifyPages) -> Result<Chain, ImageError> {
        let mut images: Vec<Image> = Vec::new();
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = dir.to_path_buf();
        loop {
            let img = Image::open_with(&cur.join(IMAGE_FILE_NAME), verify_pages)?;
            if let Some(child) = images.last() {
                check_link(child, &img, &cur)?;
            }
            if !seen.insert(img.header.image_id) || images.len() >= MAX_CHAIN {
                return Err(ImageError::ChainBroken {
                    dir: cur.clone(),
                    child: images.last().map(|i| i.path.clone()).unwrap_or_default(),
                    reason: "the chain loops back on itself".into(),
                });
            }
            let parent_id = img.header.parent_id;
            let full = img.header.is_full();
            let child_path = img.path.clone();
            images.push(img);
            dirs.push(cur.clone());
            if full {
                break;
            }
            let link = cur.join(PARENT_LINK);
            let missing = |d: PathBuf| ImageError::MissingParent { dir: d, child: child_path.clone(), parent_id: parent_id.hex() };
            if std::fs::symlink_metadata(&link).is_err() {
                return Err(missing(link));
            }
            let target = std::fs::canonicalize(&link).map_err(|_| missing(link.clone()))?;
            if !target.join(IMAGE_FILE_NAME).exists() {
                return Err(missing(target));
            }
            cur = target;
        }
        images.reverse();
        dirs.reverse();
        let chain = Chain { images, dirs };
        chain.check_pages()?;
        Ok(chain)
    }

    /// The newest image (the one the chain was loaded from).
    pub fn newest(&self) -> &Image {
        // A loaded chain always holds at least one image.
        &self.images[self.images.len() - 1]
    }

    /// Every page that an image leaves to its ancestors must be IN_IMAGE in
    /// one of them.
    fn check_pages(&self) -> Result<(), ImageError> {
        // Per image: merged [start, end) ranges of pages present in it.
        let present: Vec<Vec<(u64, u64)>> = self
            .images
            .iter()
            .map(|img| {
                let mut v: Vec<(u64, u64)> = Vec::new();
                for e in img.pagemap.iter().filter(|e| e.in_image()) {
                    match v.last_mut() {
                        Some(last) if last.1 == e.vaddr => last.1 = e.end(),
                        _ => v.push((e.vaddr, e.end())),
                    }
                }
                v
            })
            .collect();
        for (i, img) in self.images.iter().enumerate() {
            for e in img.pagemap.iter().filter(|e| !e.in_image()) {
                let mut missing = vec![(e.vaddr, e.end())];
                for anc in present[..i].iter().rev() {
                    missing = subtract(&missing, anc);
                    if missing.is_empty() {
                        break;
                    }
                }
                if let Some(&(a, _)) = missing.first() {
                    return Err(ImageError::PageNotInChain { child: img.path.clone(), vaddr: a });
                }
            }
        }
        Ok(())
    }
}

fn check_link(child: &Image, parent: &Image, parent_dir: &Path) -> Result<(), ImageError> {
    let broken = |reason: String| ImageError::ChainBroken { dir: parent_dir.to_path_buf(), child: child.path.clone(), reason };
    if parent.header.image_id != child.header.parent_id {
        return Err(broken(format!(
            "parent_id is {}, the image found through {PARENT_LINK} has id {}",
            child.header.parent_id, parent.header.image_id
        )));
    }
    if parent.header.sequence.checked_add(1) != Some(child.header.sequence) {
        return Err(broken(format!(
            "sequence {} does not follow the parent's sequence {}",
            child.header.sequence, parent.header.sequence
        )));
    }
    Ok(())
}

/// `ranges` minus the sorted, disjoint `cover` (both [start, end) lists).
fn subtract(ranges: &[(u64, u64)], cover: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(mut a, b) in ranges {
        // first cover range that ends after a
        let mut k = cover.partition_point(|c| c.1 <= a);
        while a < b {
            match cover.get(k) {
                Some(&(cs, ce)) if cs < b => {
                    if cs > a {
                        out.push((a, cs));
                    }
                    a = a.max(ce);
                    k += 1;
                }
                _ => {
                    out.push((a, b));
                    break;
                }
            }
        }
    }
    debug_assert!(out.iter().all(|(a, b)| a < b && a % PAGE_SIZE == 0));
    out
}

#[cfg(test)]
mod tests {
    use super::{subtract, PAGE_SIZE};

    #[test]
    fn subtract_ranges() {
        // in pages (the function's debug assertion wants page-aligned ends)
        let p = |v: &[(u64, u64)]| v.iter().map(|&(a, b)| (a * PAGE_SIZE, b * PAGE_SIZE)).collect::<Vec<_>>();
        let cover = p(&[(10, 20), (30, 40)]);
        assert_eq!(subtract(&p(&[(0, 50)]), &cover), p(&[(0, 10), (20, 30), (40, 50)]));
        assert_eq!(subtract(&p(&[(12, 18)]), &cover), vec![]);
        assert_eq!(subtract(&p(&[(15, 35)]), &cover), p(&[(20, 30)]));
        assert_eq!(subtract(&p(&[(40, 45)]), &cover), p(&[(40, 45)]));
        assert_eq!(subtract(&p(&[(0, 5)]), &[]), p(&[(0, 5)]));
    }
}
