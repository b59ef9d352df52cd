//! The ZIP archive a document travels in (`contentFile`): one file, deflated. Written and read
//! here over flate2 and crc32fast (both already built for the PDFs) rather than through a ZIP
//! crate: one entry is all DIAN's `SendBillSync` carries. Reading bounds what it inflates.

use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use std::io::{Read, Write};

/// The most an archive's file may inflate to (DIAN's own limit on a document is smaller).
pub const MAX_INFLATED: u64 = 10 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("the archive is not a ZIP file: {0}")]
    Format(&'static str),
    #[error("the archive's file is larger than allowed")]
    TooLarge,
    #[error("the archive's file does not match its checksum")]
    Checksum,
    #[error("inflating failed")]
    Io(#[from] std::io::Error),
}

fn u16le(value: usize) -> [u8; 2] {
    u16::try_from(value).unwrap_or(u16::MAX).to_le_bytes()
}

fn u32le(value: usize) -> [u8; 4] {
    u32::try_from(value).unwrap_or(u32::MAX).to_le_bytes()
}

/// A ZIP archive of one file, `name`, holding `content` deflated.
pub fn zip_one(name: &str, content: &[u8]) -> Result<Vec<u8>, ZipError> {
    zip_files(&[(name, content)])
}

/// A ZIP archive of `files` (name, content), each deflated, in order: what DIAN's web service
/// carries (one file) and what a customer's receipt attaches (the PDF and the
/// AttachedDocument).
pub fn zip_files(files: &[(&str, &[u8])]) -> Result<Vec<u8>, ZipError> {
    struct Entry<'a> {
        name: &'a [u8],
        crc: [u8; 4],
        compressed: usize,
        size: usize,
        offset: usize,
    }
    // Version 2.0, UTF-8 name (bit 11), deflate (8), no time: 1980-01-01 00:00.
    let common = |out: &mut Vec<u8>, entry: &Entry<'_>| {
        out.extend_from_slice(&u16le(20));
        out.extend_from_slice(&u16le(0x0800));
        out.extend_from_slice(&u16le(8));
        out.extend_from_slice(&u16le(0));
        out.extend_from_slice(&u16le(0x21));
        out.extend_from_slice(&entry.crc);
        out.extend_from_slice(&u32le(entry.compressed));
        out.extend_from_slice(&u32le(entry.size));
        out.extend_from_slice(&u16le(entry.name.len()));
        out.extend_from_slice(&u16le(0));
    };
    let mut out = Vec::new();
    let mut entries = Vec::with_capacity(files.len());
    for (name, content) in files {
        let mut encoder = DeflateEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(content)?;
        let compressed = encoder.finish()?;
        let entry = Entry {
            name: name.as_bytes(),
            crc: crc32fast::hash(content).to_le_bytes(),
            compressed: compressed.len(),
            size: content.len(),
            offset: out.len(),
        };
        out.extend_from_slice(&0x0403_4b50_u32.to_le_bytes());
        common(&mut out, &entry);
        out.extend_from_slice(entry.name);
        out.extend_from_slice(&compressed);
        entries.push(entry);
    }
    let central_at = out.len();
    for entry in &entries {
        out.extend_from_slice(&0x0201_4b50_u32.to_le_bytes());
        out.extend_from_slice(&u16le(20));
        common(&mut out, entry);
        out.extend_from_slice(&u16le(0)); // comment length
        out.extend_from_slice(&u16le(0)); // disk
        out.extend_from_slice(&u16le(0)); // internal attributes
        out.extend_from_slice(&u32le(0)); // external attributes
        out.extend_from_slice(&u32le(entry.offset));
        out.extend_from_slice(entry.name);
    }
    let central_len = out.len() - central_at;
    out.extend_from_slice(&0x0605_4b50_u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&u16le(entries.len()));
    out.extend_from_slice(&u16le(entries.len()));
    out.extend_from_slice(&u32le(central_len));
    out.extend_from_slice(&u32le(central_at));
    out.extend_from_slice(&u16le(0));
    Ok(out)
}

fn read_u16(bytes: &[u8], at: usize) -> Result<usize, ZipError> {
    let slice = bytes.get(at..at + 2).ok_or(ZipError::Format("truncated"))?;
    Ok(usize::from(u16::from_le_bytes([slice[0], slice[1]])))
}

fn read_u32(bytes: &[u8], at: usize) -> Result<u32, ZipError> {
    let slice = bytes.get(at..at + 4).ok_or(ZipError::Format("truncated"))?;
    Ok(u32::from_le_bytes([slice[0], slice[1], slice[2], slice[3]]))
}

/// The first file of a ZIP archive: its name and content.
pub fn unzip_first(archive: &[u8]) -> Result<(String, Vec<u8>), ZipError> {
    let end = (0..archive.len().saturating_sub(21))
        .rev()
        .find(|&at| read_u32(archive, at).is_ok_and(|sig| sig == 0x0605_4b50))
        .ok_or(ZipError::Format("no end of central directory"))?;
    let central = read_u32(archive, end + 16)? as usize;
    if read_u32(archive, central)? != 0x0201_4b50 {
        return Err(ZipError::Format("no central directory"));
    }
    let method = read_u16(archive, central + 10)?;
    let crc = read_u32(archive, central + 16)?;
    let compressed_len = read_u32(archive, central + 20)? as usize;
    let name_len = read_u16(archive, central + 28)?;
    let local = read_u32(archive, central + 42)? as usize;
    let name = archive
        .get(central + 46..central + 46 + name_len)
        .ok_or(ZipError::Format("truncated name"))?;
    if read_u32(archive, local)? != 0x0403_4b50 {
        return Err(ZipError::Format("no local header"));
    }
    let data_at = local + 30 + read_u16(archive, local + 26)? + read_u16(archive, local + 28)?;
    let data = archive
        .get(data_at..data_at + compressed_len)
        .ok_or(ZipError::Format("truncated data"))?;
    let mut content = Vec::new();
    match method {
        0 => content.extend_from_slice(data),
        8 => {
            DeflateDecoder::new(data)
                .take(MAX_INFLATED + 1)
                .read_to_end(&mut content)?;
        }
        _ => return Err(ZipError::Format("unsupported compression")),
    }
    if content.len() as u64 > MAX_INFLATED {
        return Err(ZipError::TooLarge);
    }
    if crc32fast::hash(&content) != crc {
        return Err(ZipError::Checksum);
    }
    Ok((String::from_utf8_lossy(name).into_owned(), content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zipped_file_unzips_to_itself() {
        let content = "<Invoice>ñandú</Invoice>".repeat(100);
        let archive = zip_one("fv0900123456000260000001.xml", content.as_bytes()).expect("zips");
        let (name, back) = unzip_first(&archive).expect("unzips");
        assert_eq!(name, "fv0900123456000260000001.xml");
        assert_eq!(back, content.as_bytes());
    }

    #[test]
    fn garbage_or_a_damaged_archive_is_an_error() {
        assert!(unzip_first(b"not a zip at all, not at all").is_err());
        let mut archive = zip_one("a.xml", b"hello hello hello").expect("zips");
        archive[40] ^= 0xff;
        assert!(unzip_first(&archive).is_err());
    }
}
