//! TensorFlow's `Event` and `Summary` protobufs, the subset TensorBoard needs for scalars and histograms.
//!
//! Hand-written `prost` messages with the field numbers of `tensorflow/core/util/event.proto` and
//! `tensorflow/core/framework/summary.proto`, so no `protoc` is needed to build. `oneof` fields are
//! modelled as optional fields with the oneof's tags: on the wire that is the same encoding.

/// `tensorflow.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// `oneof what`: the first event of every file, `brain.Event:2`.
    #[prost(string, optional, tag = "3")]
    pub file_version: Option<String>,
    /// `oneof what`: a serialized `GraphDef` (TensorBoard's Graphs tab).
    #[prost(bytes = "vec", optional, tag = "4")]
    pub graph_def: Option<Vec<u8>>,
    /// `oneof what`: a summary.
    #[prost(message, optional, tag = "5")]
    pub summary: Option<Summary>,
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    /// `oneof value`: a scalar.
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
    /// `oneof value`: a histogram.
    #[prost(message, optional, tag = "5")]
    pub histo: Option<HistogramProto>,
    /// `oneof value`: a tensor (plugins' values).
    #[prost(message, optional, tag = "8")]
    pub tensor: Option<TensorProto>,
    /// Which plugin reads the value, and its data.
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
}

/// `tensorflow.SummaryMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

/// `tensorflow.SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorflow.TensorProto`, float and string values only.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `tensorflow.DataType`: 1 is `DT_FLOAT`.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// No dimensions: a scalar.
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<super::graph::TensorShapeProto>,
    #[prost(float, repeated, packed = "true", tag = "5")]
    pub float_val: Vec<f32>,
    /// `DT_STRING` values (dtype 7): the text plugin's.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// `tensorflow.HistogramProto`: bucket `i` counts values in `[bucket_limit[i-1], bucket_limit[i])`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramProto {
    #[prost(double, tag = "1")]
    pub min: f64,
    #[prost(double, tag = "2")]
    pub max: f64,
    #[prost(double, tag = "3")]
    pub num: f64,
    #[prost(double, tag = "4")]
    pub sum: f64,
    #[prost(double, tag = "5")]
    pub sum_squares: f64,
    #[prost(double, repeated, packed = "true", tag = "6")]
    pub bucket_limit: Vec<f64>,
    #[prost(double, repeated, packed = "true", tag = "7")]
    pub bucket: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn encodes_like_tensorflow() {
        // Bytes produced by TensorBoard's own `event_pb2` for the same event.
        let event =
            Event { wall_time: 1700000000.5, step: 0, file_version: Some("brain.Event:2".into()), ..Event::default() };
        let expected = [
            0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x1a, 0x0d, b'b', b'r', b'a', b'i', b'n', b'.', b'E',
            b'v', b'e', b'n', b't', b':', b'2',
        ];
        assert_eq!(event.encode_to_vec(), expected);
    }

    #[test]
    fn histogram_buckets_are_packed() {
        let histo = HistogramProto { bucket_limit: vec![1.0, 2.0], bucket: vec![3.0, 4.0], ..Default::default() };
        let bytes = histo.encode_to_vec();
        // Field 6, wire type 2 (length-delimited = packed), 16 bytes.
        assert!(bytes.windows(2).any(|w| w == [0x32, 16]), "{bytes:x?}");
    }
}
