//! TFRecord framing, the container of event files:
//! `u64 length (LE) | u32 masked CRC32C of the length | data | u32 masked CRC32C of the data`.
//!
//! The CRCs are "masked" (rotated and offset) because TensorFlow found that CRCs of data that itself
//! contains CRCs are weak; every reader, TensorBoard included, checks them.

use super::error::{Result, SummaryError};

const MASK_DELTA: u32 = 0xa282_ead8;

/// TensorFlow's `crc32c::Mask`.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Appends one framed record holding `data` to `out`.
pub fn append_record(out: &mut Vec<u8>, data: &[u8]) {
    let length = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

/// Splits a TFRecord file into its records, verifying both CRCs of each. `url` names the file in errors.
pub fn read_records<'a>(bytes: &'a [u8], url: &str) -> Result<Vec<&'a [u8]>> {
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let error =
            |reason: String| SummaryError::Record { url: url.to_string(), record: records.len(), offset, reason };
        let header = bytes.get(offset..offset + 12).ok_or_else(|| error("truncated header".into()))?;
        let (length_bytes, length_crc) = header.split_at(8);
        if masked_crc32c(length_bytes).to_le_bytes() != length_crc {
            return Err(error("length CRC mismatch".into()));
        }
        let mut length = [0u8; 8];
        length.copy_from_slice(length_bytes);
        let length = usize::try_from(u64::from_le_bytes(length)).map_err(|_| error("length overflows".into()))?;
        let start = offset + 12;
        let end = start.checked_add(length).ok_or_else(|| error("length overflows".into()))?;
        let data = bytes.get(start..end).ok_or_else(|| error(format!("truncated data ({length} bytes announced)")))?;
        let data_crc = bytes.get(end..end + 4).ok_or_else(|| error("truncated data CRC".into()))?;
        if masked_crc32c(data).to_le_bytes() != data_crc {
            return Err(error("data CRC mismatch".into()));
        }
        records.push(data);
        offset = end + 4;
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crcs_match_tensorflow() {
        // Reference values from TensorBoard's `masked_crc32c` (tensorflow_stub).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc32c(b""), 0xa282_ead8);
        assert_eq!(masked_crc32c(&9u64.to_le_bytes()), 0x3971_f937);
    }

    #[test]
    fn frames_like_tensorflow() {
        // The first record of an event file written by TensorBoard's Python writer
        // (Event{wall_time: 1700000000.5, file_version: "brain.Event:2"}).
        let expected = "1800000000000000a37f4b220900002040fc54d9411a0d627261696e2e4576656e743a322b353110";
        let data = &hex(expected)[12..12 + 24];
        let mut out = Vec::new();
        append_record(&mut out, data);
        assert_eq!(out, hex(expected));
    }

    #[test]
    fn reads_back_and_detects_damage() {
        let mut file = Vec::new();
        append_record(&mut file, b"first");
        append_record(&mut file, b"second record");
        let read = read_records(&file, "events").ok();
        assert_eq!(read, Some(vec![&b"first"[..], &b"second record"[..]]));

        let mut damaged = file.clone();
        damaged[12 + 2] ^= 1;
        let message = read_records(&damaged, "dir/events").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("dir/events") && message.contains("record 0") && message.contains("data CRC"),
            "{message}"
        );
        let message = read_records(&file[..file.len() - 2], "e").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("record 1") && message.contains("truncated"), "{message}");
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).filter_map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
    }
}
