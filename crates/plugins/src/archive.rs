//! Reading plugin-type archives (`application/x-jar`: a zip file) without trusting them:
//! only the entries' names and contents are taken, stored or deflated, and no name ever
//! reaches the file system. The sizes an archive declares are never trusted: the bytes
//! each entry really gives are counted as they are produced (a stored entry's are its
//! stored bytes, a deflated one's are inflated within what is left) and reading stops at
//! the bound of the entry and of the whole archive, so a small archive cannot become a
//! large one. Entries that share bytes are refused: overlapping entries are how an
//! archive makes one stored block count many times.

use std::ops::Range;

use miniz_oxide::inflate::{TINFLStatus, decompress_to_vec_with_limit};

/// The most entries an archive may hold, the most bytes one entry may give, and the most
/// all its entries may give together.
pub const MAX_ENTRIES: usize = 256;
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;
pub const MAX_TOTAL_BYTES: usize = 4 * 1024 * 1024;

/// One file of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// A file as the central directory describes it.
struct Record {
    name: String,
    method: u16,
    compressed: usize,
    /// What it says it inflates to: checked against what it gives, never relied on.
    size: usize,
    local: usize,
}

/// The files of the zip archive `data` (directories skipped), or why it cannot be read.
pub fn entries(data: &[u8]) -> Result<Vec<Entry>, String> {
    let records = central_directory(data)?;
    let spans = records
        .iter()
        .map(|record| span(data, record))
        .collect::<Result<Vec<_>, _>>()?;
    refuse_overlaps(&records, &spans)?;
    let mut out = Vec::with_capacity(records.len());
    let mut total = 0;
    for (record, span) in records.into_iter().zip(spans) {
        let bytes = read(&record, &data[span.data], MAX_TOTAL_BYTES - total)?;
        total += bytes.len();
        out.push(Entry {
            name: record.name,
            bytes,
        });
    }
    Ok(out)
}

/// The files the central directory lists.
fn central_directory(data: &[u8]) -> Result<Vec<Record>, String> {
    let end = find_end(data).ok_or("not a zip archive (no end of central directory)")?;
    let count = u16_at(data, end + 10)? as usize;
    let directory = u32_at(data, end + 16)? as usize;
    if count > MAX_ENTRIES {
        return Err(format!("it has {count} entries, more than {MAX_ENTRIES}"));
    }
    let mut records = Vec::new();
    let mut at = directory;
    for _ in 0..count {
        if u32_at(data, at)? != 0x0201_4b50 {
            return Err("a central directory entry is damaged".into());
        }
        let name_len = u16_at(data, at + 28)? as usize;
        let extra_len = u16_at(data, at + 30)? as usize;
        let comment_len = u16_at(data, at + 32)? as usize;
        let name_bytes = slice(data, at + 46, name_len)?;
        let name =
            String::from_utf8(name_bytes.to_vec()).map_err(|_| "an entry name is not UTF-8")?;
        let record = Record {
            name,
            method: u16_at(data, at + 10)?,
            compressed: u32_at(data, at + 20)? as usize,
            size: u32_at(data, at + 24)? as usize,
            local: u32_at(data, at + 42)? as usize,
        };
        at += 46 + name_len + extra_len + comment_len;
        if !record.name.ends_with('/') {
            records.push(record);
        }
    }
    Ok(records)
}

/// Where an entry lies: its local header and data (`whole`), and its data alone.
struct Span {
    whole: Range<usize>,
    data: Range<usize>,
}

fn span(data: &[u8], record: &Record) -> Result<Span, String> {
    let name = &record.name;
    if record.size > MAX_ENTRY_BYTES {
        return Err(format!(
            "{name}: declares {} bytes, more than {MAX_ENTRY_BYTES}",
            record.size
        ));
    }
    let local = record.local;
    if u32_at(data, local)? != 0x0403_4b50 {
        return Err(format!("{name}: its local header is damaged"));
    }
    let start =
        local + 30 + u16_at(data, local + 26)? as usize + u16_at(data, local + 28)? as usize;
    slice(data, start, record.compressed)?;
    let end = start + record.compressed;
    Ok(Span {
        whole: local..end,
        data: start..end,
    })
}

/// Refuses entries that share bytes with another: each byte of an archive is read once.
fn refuse_overlaps(records: &[Record], spans: &[Span]) -> Result<(), String> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i].whole.start);
    for pair in order.windows(2) {
        let (first, next) = (pair[0], pair[1]);
        if spans[next].whole.start < spans[first].whole.end {
            return Err(format!(
                "the entries {} and {} overlap (they share bytes of the archive); \
                 archives whose entries overlap are refused",
                records[first].name, records[next].name
            ));
        }
    }
    Ok(())
}

/// The bytes of an entry, counted as they are produced: at most `MAX_ENTRY_BYTES`, and
/// at most `room` (what the archive's bound leaves). One byte past the bound is produced
/// at most, to tell a full entry from a larger one.
fn read(record: &Record, raw: &[u8], room: usize) -> Result<Vec<u8>, String> {
    let name = &record.name;
    let limit = MAX_ENTRY_BYTES.min(room);
    let past = || {
        if room < MAX_ENTRY_BYTES {
            format!("the entries give more than {MAX_TOTAL_BYTES} bytes in all (at {name})")
        } else {
            format!("{name}: gives more than {MAX_ENTRY_BYTES} bytes")
        }
    };
    let bytes = match record.method {
        0 if raw.len() > limit => return Err(past()),
        0 => raw.to_vec(),
        8 => match decompress_to_vec_with_limit(raw, limit + 1) {
            Ok(bytes) if bytes.len() <= limit => bytes,
            Ok(_) => return Err(past()),
            Err(e) if e.status == TINFLStatus::HasMoreOutput => return Err(past()),
            Err(_) => return Err(format!("{name}: cannot be inflated (damaged)")),
        },
        other => {
            return Err(format!(
                "{name}: compression method {other} is not read (only stored and deflated)"
            ));
        }
    };
    if bytes.len() != record.size {
        return Err(format!(
            "{name}: declares {} bytes but gives {}",
            record.size,
            bytes.len()
        ));
    }
    Ok(bytes)
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
        let (len, crc) = (bytes.len() as u32, crc32(bytes));
        out.extend(stored_header(name, len, len, crc, None));
        out.extend_from_slice(bytes);
        directory.extend(stored_header(name, len, len, crc, Some(offset)));
    }
    finish_zip(out, directory, files.len())
}

/// A zip bomb of the kind [`entries`] refuses: `payload` stored once, and `count` entries
/// that all point at it, each declaring `declared` bytes (tests build it).
pub fn overlapping_zip(payload: &[u8], count: usize, declared: u32) -> Vec<u8> {
    let (len, crc) = (payload.len() as u32, crc32(payload));
    let mut out = stored_header("bomb.rhai", len, declared, crc, None);
    out.extend_from_slice(payload);
    let directory = (0..count)
        .flat_map(|i| stored_header(&format!("bomb{i}.rhai"), len, declared, crc, Some(0)))
        .collect();
    finish_zip(out, directory, count)
}

/// The local header of a stored entry, or its central one (with `offset`, where its
/// local header is).
fn stored_header(name: &str, stored: u32, size: u32, crc: u32, offset: Option<u32>) -> Vec<u8> {
    let mut h = Vec::new();
    let signature: u32 = if offset.is_some() {
        0x0201_4b50
    } else {
        0x0403_4b50
    };
    h.extend(signature.to_le_bytes());
    if offset.is_some() {
        h.extend(20u16.to_le_bytes());
    }
    h.extend(20u16.to_le_bytes());
    h.extend([0u8; 4]); // flags, method (stored)
    h.extend([0u8; 4]); // time, date
    h.extend(crc.to_le_bytes());
    h.extend(stored.to_le_bytes());
    h.extend(size.to_le_bytes());
    h.extend((name.len() as u16).to_le_bytes());
    h.extend(0u16.to_le_bytes());
    if let Some(offset) = offset {
        h.extend([0u8; 6]); // comment length, disk, internal attributes
        h.extend(0u32.to_le_bytes());
        h.extend(offset.to_le_bytes());
    }
    h.extend(name.as_bytes());
    h
}

/// The entries `out` followed by their central `directory` of `count` records and its end.
fn finish_zip(mut out: Vec<u8>, directory: Vec<u8>, count: usize) -> Vec<u8> {
    let start = out.len() as u32;
    let size = directory.len() as u32;
    out.extend(directory);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((count as u16).to_le_bytes());
    out.extend((count as u16).to_le_bytes());
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

    /// `files` deflated, each declaring its real size.
    fn deflated_zip(files: &[(&str, &[u8])]) -> Vec<u8> {
        let deflated: Vec<Vec<u8>> = files
            .iter()
            .map(|(_, bytes)| miniz_oxide::deflate::compress_to_vec(bytes, 6))
            .collect();
        let stored: Vec<(&str, &[u8])> = files
            .iter()
            .zip(&deflated)
            .map(|((name, _), bytes)| (*name, &bytes[..]))
            .collect();
        let mut zip = stored_zip(&stored);
        let (mut local, mut central) = (0, u32_at(&zip, zip.len() - 22 + 16).unwrap() as usize);
        for ((name, bytes), packed) in files.iter().zip(&deflated) {
            let size = (bytes.len() as u32).to_le_bytes();
            zip[local + 8] = 8;
            zip[local + 22..local + 26].copy_from_slice(&size);
            zip[central + 10] = 8;
            zip[central + 24..central + 28].copy_from_slice(&size);
            local += 30 + name.len() + packed.len();
            central += 46 + name.len();
        }
        zip
    }

    #[test]
    fn stored_and_deflated_entries_are_read() {
        let zip = stored_zip(&[("a.rhai", b"fn a() {}"), ("META-INF/MANIFEST.MF", b"x")]);
        let read = entries(&zip).unwrap();
        assert_eq!(read[0].name, "a.rhai");
        assert_eq!(read[0].bytes, b"fn a() {}");
        assert_eq!(read.len(), 2);
        let full = vec![b'x'; MAX_ENTRY_BYTES];
        let read = entries(&deflated_zip(&[
            ("b.rhai", &full),
            ("c.rhai", b"fn c() {}"),
        ]));
        assert_eq!(read.unwrap()[1].bytes, b"fn c() {}");
        for junk in [&b""[..], b"PK\x05\x06", &zip[..zip.len() / 2]] {
            assert!(entries(junk).is_err());
        }
    }

    #[test]
    fn the_bytes_entries_give_are_counted_whatever_they_declare() {
        // Deflated past the entry's bound, declaring a small size.
        let big = vec![b'x'; MAX_ENTRY_BYTES * 4];
        let mut bomb = deflated_zip(&[("b.rhai", &big)]);
        let central = bomb.len() - 22 - (46 + "b.rhai".len());
        bomb[central + 24..central + 28].copy_from_slice(&1u32.to_le_bytes());
        let error = entries(&bomb).unwrap_err();
        assert!(error.contains("b.rhai: gives more than 262144"), "{error}");
        // Stored past the bound, declaring 1 byte.
        let stored = vec![b'x'; MAX_ENTRY_BYTES + 1];
        let error = entries(&overlapping_zip(&stored, 1, 1)).unwrap_err();
        assert!(error.contains("gives more than 262144"), "{error}");
        // Within the bounds, but not what it declares.
        let error = entries(&overlapping_zip(b"fn a() {}", 1, 1)).unwrap_err();
        assert!(error.contains("declares 1 bytes but gives 9"), "{error}");
        // Each within its bound, but more than the archive's in all.
        let full = vec![b'x'; MAX_ENTRY_BYTES];
        let names: Vec<String> = (0..=MAX_TOTAL_BYTES / MAX_ENTRY_BYTES)
            .map(|i| format!("{i}.rhai"))
            .collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &full[..])).collect();
        let error = entries(&deflated_zip(&files)).unwrap_err();
        assert!(error.contains("more than 4194304 bytes in all"), "{error}");
        assert_eq!(
            entries(&deflated_zip(&files[1..])).unwrap().len(),
            files.len() - 1
        );
    }

    #[test]
    fn entries_that_share_bytes_are_refused() {
        let error = entries(&overlapping_zip(b"x", MAX_ENTRIES, 1)).unwrap_err();
        assert!(error.contains("overlap"), "{error}");
        assert!(error.contains("bomb0.rhai and bomb1.rhai"), "{error}");
        // The second entry's header inside the first's data.
        let inner = stored_zip(&[("b.rhai", b"fn b() {}")]);
        let mut zip = stored_zip(&[("a.rhai", &inner), ("b.rhai", b"fn b() {}")]);
        let second = zip.len() - 22 - (46 + "b.rhai".len());
        let offset = (30 + "a.rhai".len()) as u32;
        zip[second + 42..second + 46].copy_from_slice(&offset.to_le_bytes());
        let error = entries(&zip).unwrap_err();
        assert!(error.contains("a.rhai and b.rhai overlap"), "{error}");
    }

    /// Any byte of an archive damaged, or the archive cut anywhere: refused or read,
    /// never a panic.
    #[test]
    fn damaged_archives_are_refused_without_a_panic() {
        let zip = deflated_zip(&[("a.rhai", b"fn a() {}"), ("b/c.rhai", b"fn c() {}")]);
        for at in 0..zip.len() {
            for byte in [0x00, 0x7f, 0xff] {
                let mut damaged = zip.clone();
                damaged[at] = byte;
                let _ = entries(&damaged);
            }
            let _ = entries(&zip[..at]);
        }
    }
}
