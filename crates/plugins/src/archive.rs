//! Reading plugin-type archives (`application/x-jar`: a zip file) without trusting them:
//! only the entries' names and contents are taken, stored or deflated, each within a size
//! bound checked while inflating (a small archive cannot become a large one), and no name
//! ever reaches the file system.

use miniz_oxide::inflate::decompress_to_vec_with_limit;

/// The most entries an archive may hold, and the largest entry once inflated.
pub const MAX_ENTRIES: usize = 256;
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;

/// One file of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// The files of the zip archive `data` (directories skipped), or why it cannot be read.
pub fn entries(data: &[u8]) -> Result<Vec<Entry>, String> {
    let end = find_end(data).ok_or("not a zip archive (no end of central directory)")?;
    let count = u16_at(data, end + 10)? as usize;
    let directory = u32_at(data, end + 16)? as usize;
    if count > MAX_ENTRIES {
        return Err(format!("it has {count} entries, more than {MAX_ENTRIES}"));
    }
    let mut out = Vec::new();
    let mut at = directory;
    for _ in 0..count {
        if u32_at(data, at)? != 0x0201_4b50 {
            return Err("a central directory entry is damaged".into());
        }
        let method = u16_at(data, at + 10)?;
        let compressed = u32_at(data, at + 20)? as usize;
        let size = u32_at(data, at + 24)? as usize;
        let name_len = u16_at(data, at + 28)? as usize;
        let extra_len = u16_at(data, at + 30)? as usize;
        let comment_len = u16_at(data, at + 32)? as usize;
        let local = u32_at(data, at + 42)? as usize;
        let name_bytes = slice(data, at + 46, name_len)?;
        let name =
            String::from_utf8(name_bytes.to_vec()).map_err(|_| "an entry name is not UTF-8")?;
        at += 46 + name_len + extra_len + comment_len;
        if name.ends_with('/') {
            continue;
        }
        if size > MAX_ENTRY_BYTES {
            return Err(format!("{name}: {size} bytes, more than {MAX_ENTRY_BYTES}"));
        }
        if u32_at(data, local)? != 0x0403_4b50 {
            return Err(format!("{name}: its local header is damaged"));
        }
        let start =
            local + 30 + u16_at(data, local + 26)? as usize + u16_at(data, local + 28)? as usize;
        let raw = slice(data, start, compressed)?;
        let bytes = match method {
            0 => raw.to_vec(),
            8 => decompress_to_vec_with_limit(raw, MAX_ENTRY_BYTES).map_err(|_| {
                format!("{name}: cannot be inflated, or inflates past {MAX_ENTRY_BYTES} bytes")
            })?,
            other => {
                return Err(format!(
                    "{name}: compression method {other} is not read (only stored and deflated)"
                ));
            }
        };
        out.push(Entry { name, bytes });
    }
    Ok(out)
}

/// The offset of the end-of-central-directory record (searched from the end, past a
/// comment of at most 64 KiB).
fn find_end(data: &[u8]) -> Option<usize> {
    let last = data.len().checked_sub(22)?;
    let first = last.saturating_sub(65_535);
    (first..=last)
        .rev()
        .find(|&i| data[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
}

fn slice(data: &[u8], at: usize, len: usize) -> Result<&[u8], String> {
    at.checked_add(len)
        .and_then(|end| data.get(at..end))
        .ok_or_else(|| "the archive is truncated".to_string())
}

fn u16_at(data: &[u8], at: usize) -> Result<u16, String> {
    let b = slice(data, at, 2)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, String> {
    let b = slice(data, at, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A zip archive of `files`, stored (tests and examples build archives with it).
pub fn stored_zip(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut directory = Vec::new();
    for (name, bytes) in files {
        let offset = out.len() as u32;
        let crc = crc32(bytes);
        let header = |signature: u32, central: bool| {
            let mut h = Vec::new();
            h.extend(signature.to_le_bytes());
            if central {
                h.extend(20u16.to_le_bytes());
            }
            h.extend(20u16.to_le_bytes());
            h.extend([0u8; 4]); // flags, method (stored)
            h.extend([0u8; 4]); // time, date
            h.extend(crc.to_le_bytes());
            h.extend((bytes.len() as u32).to_le_bytes());
            h.extend((bytes.len() as u32).to_le_bytes());
            h.extend((name.len() as u16).to_le_bytes());
            h.extend(0u16.to_le_bytes());
            if central {
                h.extend([0u8; 6]); // comment length, disk, internal attributes
                h.extend(0u32.to_le_bytes());
                h.extend(offset.to_le_bytes());
            }
            h.extend(name.as_bytes());
            h
        };
        out.extend(header(0x0403_4b50, false));
        out.extend_from_slice(bytes);
        directory.extend(header(0x0201_4b50, true));
    }
    let start = out.len() as u32;
    let size = directory.len() as u32;
    out.extend(directory);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((files.len() as u16).to_le_bytes());
    out.extend((files.len() as u16).to_le_bytes());
    out.extend(size.to_le_bytes());
    out.extend(start.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_and_deflated_entries_are_read_and_bombs_are_not() {
        let zip = stored_zip(&[("a.rhai", b"fn a() {}"), ("META-INF/MANIFEST.MF", b"x")]);
        let read = entries(&zip).unwrap();
        assert_eq!(read[0].name, "a.rhai");
        assert_eq!(read[0].bytes, b"fn a() {}");
        assert_eq!(read.len(), 2);
        // A deflated entry that claims a small size but inflates past the bound.
        let big = vec![b'x'; MAX_ENTRY_BYTES * 4];
        let deflated = miniz_oxide::deflate::compress_to_vec(&big, 6);
        let mut bomb = stored_zip(&[("b.rhai", &deflated)]);
        bomb[8] = 8; // local header: method deflate
        let central = bomb.len() - 22 - (46 + "b.rhai".len());
        bomb[central + 10] = 8;
        let error = entries(&bomb).unwrap_err();
        assert!(error.contains("inflates past"), "{error}");
        for junk in [&b""[..], b"PK\x05\x06", &zip[..zip.len() / 2]] {
            assert!(entries(junk).is_err());
        }
    }
}
