//! A ZIP archive written as it goes (`Archive`): each file is whole when it is added (a
//! rendered PDF, a signed XML), so its CRC and sizes go in its local header and nothing is
//! ever written back; `add` answers the bytes to send next, `finish` the central directory.
//! What it keeps between files is the central directory's part of each (its name, checksum,
//! sizes and offset: under a hundred bytes a file), which a ZIP reader needs at the end.
//!
//! ZIP64 where the archive needs it (more than 65,534 files, or a directory beyond 4 GiB: a
//! month of 100,000 invoices with DIAN holds 300,000 files), in the central directory only: a
//! single file is never near 4 GiB, so local headers stay classic. Sans I/O, so that the
//! caller chooses where the bytes go and where the deflating runs (off the async workers).
//! Not `dian::soap::zip` (one archive in memory, what DIAN's web service carries).

use chrono::{Datelike, NaiveDateTime, Timelike};
use flate2::Compression;
use flate2::write::DeflateEncoder;
use std::io::Write;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_DIRECTORY: u32 = 0x0605_4b50;
const ZIP64_END_OF_DIRECTORY: u32 = 0x0606_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
/// Bit 11: the name is UTF-8.
const UTF8_NAMES: u16 = 0x0800;
/// 2.0 (deflate) for a classic record, 4.5 where ZIP64 fields appear.
const VERSION_CLASSIC: u16 = 20;
const VERSION_ZIP64: u16 = 45;

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("a file of {0} bytes is too large for an archive's entry")]
    TooLarge(usize),
    #[error("deflating a file failed")]
    Deflate(#[from] std::io::Error),
}

/// How a file's bytes are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// As they are: a PDF's streams are compressed already.
    Stored,
    /// Deflated: XML shrinks to a fraction.
    Deflated,
}

impl Method {
    fn code(self) -> u16 {
        match self {
            Method::Stored => 0,
            Method::Deflated => 8,
        }
    }
}

struct Entry {
    name: Box<str>,
    method: u16,
    time: u16,
    date: u16,
    crc: u32,
    compressed: u32,
    size: u32,
    offset: u64,
}

/// An archive being written: what has gone out so far and the directory still to write.
#[derive(Default)]
pub struct Archive {
    written: u64,
    entries: Vec<Entry>,
}

/// MS-DOS's time and date of `at` (two-second steps; before 1980 is 1980-01-01 00:00).
fn dos_time_date(at: NaiveDateTime) -> (u16, u16) {
    if at.year() < 1980 || at.year() > 2107 {
        return (0, (1 << 5) | 1);
    }
    let time = (at.hour() << 11) | (at.minute() << 5) | (at.second() / 2);
    let date = ((at.year() as u32 - 1980) << 9) | (at.month() << 5) | at.day();
    (time as u16, date as u16)
}

fn put16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// `value` in a classic 32-bit field: itself, or all ones when ZIP64 carries it.
fn clamp32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

impl Archive {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many files the archive holds so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `content` as the file `name` (a `/` separates folders), last modified `modified`
    /// (local time, as ZIP keeps it): the bytes to send next, its local header and data.
    pub fn add(
        &mut self,
        name: &str,
        content: &[u8],
        method: Method,
        modified: NaiveDateTime,
    ) -> Result<Vec<u8>, ArchiveError> {
        let size = u32::try_from(content.len())
            .ok()
            .filter(|size| *size < u32::MAX)
            .ok_or(ArchiveError::TooLarge(content.len()))?;
        let deflated;
        let data: &[u8] = match method {
            Method::Stored => content,
            Method::Deflated => {
                let mut encoder = DeflateEncoder::new(Vec::new(), Compression::default());
                encoder.write_all(content)?;
                deflated = encoder.finish()?;
                &deflated
            }
        };
        let compressed = u32::try_from(data.len())
            .ok()
            .filter(|size| *size < u32::MAX)
            .ok_or(ArchiveError::TooLarge(data.len()))?;
        let (time, date) = dos_time_date(modified);
        let entry = Entry {
            name: name.into(),
            method: method.code(),
            time,
            date,
            crc: crc32fast::hash(content),
            compressed,
            size,
            offset: self.written,
        };
        let mut out = Vec::with_capacity(30 + name.len() + data.len());
        put32(&mut out, LOCAL_HEADER);
        put16(&mut out, VERSION_CLASSIC);
        Self::common(&mut out, &entry);
        put16(&mut out, 0); // no extra field
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        self.written += out.len() as u64;
        self.entries.push(entry);
        Ok(out)
    }

    /// What the local and the central header share: flags, method, time, CRC, sizes, name's
    /// length.
    fn common(out: &mut Vec<u8>, entry: &Entry) {
        put16(out, UTF8_NAMES);
        put16(out, entry.method);
        put16(out, entry.time);
        put16(out, entry.date);
        put32(out, entry.crc);
        put32(out, entry.compressed);
        put32(out, entry.size);
        put16(out, entry.name.len() as u16);
    }

    /// The central directory and its end records: the archive's last bytes.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::new();
        let directory_at = self.written;
        for entry in &self.entries {
            let far = entry.offset >= u64::from(u32::MAX);
            put32(&mut out, CENTRAL_HEADER);
            put16(&mut out, VERSION_ZIP64);
            put16(&mut out, if far { VERSION_ZIP64 } else { VERSION_CLASSIC });
            Self::common(&mut out, entry);
            put16(&mut out, if far { 12 } else { 0 }); // extra field's length
            put16(&mut out, 0); // comment
            put16(&mut out, 0); // disk
            put16(&mut out, 0); // internal attributes
            put32(&mut out, 0); // external attributes
            put32(&mut out, clamp32(entry.offset));
            out.extend_from_slice(entry.name.as_bytes());
            if far {
                // The ZIP64 extended information: only the field left all ones above.
                put16(&mut out, 0x0001);
                put16(&mut out, 8);
                put64(&mut out, entry.offset);
            }
        }
        let directory_len = out.len() as u64;
        let count = self.entries.len() as u64;
        let zip64 = count >= u64::from(u16::MAX)
            || directory_at >= u64::from(u32::MAX)
            || directory_len >= u64::from(u32::MAX);
        if zip64 {
            let record_at = directory_at + directory_len;
            put32(&mut out, ZIP64_END_OF_DIRECTORY);
            put64(&mut out, 44); // the record's size after this field
            put16(&mut out, VERSION_ZIP64);
            put16(&mut out, VERSION_ZIP64);
            put32(&mut out, 0); // this disk
            put32(&mut out, 0); // the directory's disk
            put64(&mut out, count);
            put64(&mut out, count);
            put64(&mut out, directory_len);
            put64(&mut out, directory_at);
            put32(&mut out, ZIP64_LOCATOR);
            put32(&mut out, 0);
            put64(&mut out, record_at);
            put32(&mut out, 1); // disks
        }
        let count16 = u16::try_from(count).unwrap_or(u16::MAX);
        put32(&mut out, END_OF_DIRECTORY);
        put16(&mut out, 0);
        put16(&mut out, 0);
        put16(&mut out, count16);
        put16(&mut out, count16);
        put32(&mut out, clamp32(directory_len));
        put32(&mut out, clamp32(directory_at));
        put16(&mut out, 0); // comment
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn at() -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 30)
            .and_then(|d| d.and_hms_opt(23, 30, 10))
            .expect("an instant")
    }

    fn u16_at(bytes: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([bytes[at], bytes[at + 1]])
    }

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
    }

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    }

    #[test]
    fn an_archive_of_two_files_is_what_a_zip_reader_reads() {
        let mut archive = Archive::new();
        let mut bytes = archive
            .add("invoices/FV-1.pdf", b"%PDF-1.7 one", Method::Stored, at())
            .expect("add");
        let xml = "<Invoice>factura electrónica</Invoice>".repeat(40);
        bytes.extend(
            archive
                .add("invoices/FV-1.xml", xml.as_bytes(), Method::Deflated, at())
                .expect("add"),
        );
        assert_eq!(archive.len(), 2);
        bytes.extend(archive.finish());
        let (name, content) = crate::dian::soap::zip::unzip_first(&bytes).expect("read back");
        assert_eq!(name, "invoices/FV-1.pdf");
        assert_eq!(content, b"%PDF-1.7 one");
        // A deflated file, read back by the reader of DIAN's archives.
        let mut alone = Archive::new();
        let mut deflated = alone
            .add("invoices/FV-1.xml", xml.as_bytes(), Method::Deflated, at())
            .expect("add");
        assert!(deflated.len() < xml.len() / 4, "deflated");
        deflated.extend(alone.finish());
        let (name, content) = crate::dian::soap::zip::unzip_first(&deflated).expect("read back");
        assert_eq!(name, "invoices/FV-1.xml");
        assert_eq!(content, xml.as_bytes());
        // The end record counts both and points at the directory.
        let end = bytes.len() - 22;
        assert_eq!(u32_at(&bytes, end), END_OF_DIRECTORY);
        assert_eq!(u16_at(&bytes, end + 10), 2);
        let directory_at = u32_at(&bytes, end + 16) as usize;
        assert_eq!(u32_at(&bytes, directory_at), CENTRAL_HEADER);
        // 23:30:10 on 2026-11-30, as MS-DOS writes it.
        assert_eq!(u16_at(&bytes, 10), (23 << 11) | (30 << 5) | 5);
        assert_eq!(u16_at(&bytes, 12), ((2026 - 1980) << 9) | (11 << 5) | 30);
    }

    #[test]
    fn more_files_than_a_classic_directory_counts_turn_on_zip64() {
        let mut archive = Archive::new();
        let mut written = 0usize;
        let files = usize::from(u16::MAX) + 10;
        for i in 0..files {
            written += archive
                .add(&format!("f/{i}"), b"x", Method::Stored, at())
                .expect("add")
                .len();
        }
        let tail = archive.finish();
        let end = tail.len() - 22;
        assert_eq!(u32_at(&tail, end), END_OF_DIRECTORY);
        assert_eq!(
            u16_at(&tail, end + 10),
            u16::MAX,
            "the classic count says: see ZIP64"
        );
        let locator = end - 20;
        assert_eq!(u32_at(&tail, locator), ZIP64_LOCATOR);
        let record_at = u64_at(&tail, locator + 8) as usize - written;
        assert_eq!(u32_at(&tail, record_at), ZIP64_END_OF_DIRECTORY);
        assert_eq!(u64_at(&tail, record_at + 32), files as u64);
        assert_eq!(
            u64_at(&tail, record_at + 48),
            written as u64,
            "the directory's offset"
        );
        // And a reader we did not write agrees, where there is one (Python's `zipfile`).
        if std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_ok()
        {
            let mut whole = Vec::with_capacity(written + tail.len());
            let mut again = Archive::new();
            for i in 0..files {
                whole.extend(
                    again
                        .add(&format!("f/{i}"), b"x", Method::Stored, at())
                        .expect("add"),
                );
            }
            whole.extend(again.finish());
            let path = std::env::temp_dir().join(format!("zip64-{}.zip", uuid::Uuid::new_v4()));
            std::fs::write(&path, &whole).expect("write");
            let out = std::process::Command::new("python3")
                .arg("-c")
                .arg("import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nn = z.namelist()\nprint(len(n), n[-1], z.read(n[-1]).decode())")
                .arg(&path)
                .output()
                .expect("python3");
            let _ = std::fs::remove_file(&path);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let printed = String::from_utf8_lossy(&out.stdout);
            assert_eq!(printed.trim(), format!("{files} f/{} x", files - 1));
        }
    }

    #[test]
    fn an_offset_past_four_gibibytes_goes_in_the_zip64_extra_field() {
        let mut archive = Archive {
            written: 5 << 30,
            entries: Vec::new(),
        };
        archive
            .add("late.xml", b"<x/>", Method::Stored, at())
            .expect("add");
        let tail = archive.finish();
        assert_eq!(u32_at(&tail, 0), CENTRAL_HEADER);
        assert_eq!(
            u32_at(&tail, 42),
            u32::MAX,
            "the classic offset defers to ZIP64"
        );
        let extra = 46 + "late.xml".len();
        assert_eq!(u16_at(&tail, extra), 0x0001);
        assert_eq!(u64_at(&tail, extra + 4), 5 << 30);
        let end = tail.len() - 22;
        assert_eq!(u32_at(&tail, end - 20), ZIP64_LOCATOR);
    }
}
