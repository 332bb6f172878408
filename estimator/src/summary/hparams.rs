//! A run's hyperparameters for TensorBoard's HParams dashboard: the plugin's
//! `session_start_info` summary (`tensorboard/plugins/hparams/{plugin_data,api}.proto`),
//! hand-written as `prost` messages like the rest of the event protos.

use super::{
    graph::TensorShapeProto,
    proto::{SummaryValue, TensorProto},
};
use std::collections::{BTreeMap, HashMap};

/// One hyperparameter's value, as the dashboard's columns show it.
#[derive(Debug, Clone, PartialEq)]
pub enum HParam {
    Number(f64),
    Text(String),
    Bool(bool),
}

/// The tag TensorBoard looks for (`tensorboard.plugins.hparams.metadata.SESSION_START_INFO_TAG`).
pub const SESSION_START_INFO_TAG: &str = "_hparams_/session_start_info";

/// `tensorboard.hparams.HParamsPluginData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamsPluginData {
    #[prost(int32, tag = "1")]
    pub version: i32,
    #[prost(message, optional, tag = "3")]
    pub session_start_info: Option<SessionStartInfo>,
}

/// `tensorboard.hparams.SessionStartInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionStartInfo {
    #[prost(map = "string, message", tag = "1")]
    pub hparams: HashMap<String, ProtoValue>,
    #[prost(string, tag = "4")]
    pub group_name: String,
    #[prost(double, tag = "5")]
    pub start_time_secs: f64,
}

/// `google.protobuf.Value`, the cases a hyperparameter takes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoValue {
    #[prost(double, optional, tag = "2")]
    pub number_value: Option<f64>,
    #[prost(string, optional, tag = "3")]
    pub string_value: Option<String>,
    #[prost(bool, optional, tag = "4")]
    pub bool_value: Option<bool>,
}

/// The summary value carrying `hparams`: plugin metadata plus the placeholder tensor (a
/// float 0) TensorBoard's own writer attaches, without which its readers drop the value.
pub(super) fn session_start(hparams: &BTreeMap<String, HParam>, start_time_secs: f64) -> SummaryValue {
    let hparams = hparams
        .iter()
        .map(|(k, v)| {
            let value = match v {
                HParam::Number(x) => ProtoValue { number_value: Some(*x), ..ProtoValue::default() },
                HParam::Text(s) => ProtoValue { string_value: Some(s.clone()), ..ProtoValue::default() },
                HParam::Bool(b) => ProtoValue { bool_value: Some(*b), ..ProtoValue::default() },
            };
            (k.clone(), value)
        })
        .collect();
    let data = HParamsPluginData {
        version: 0,
        session_start_info: Some(SessionStartInfo { hparams, group_name: String::new(), start_time_secs }),
    };
    SummaryValue {
        tag: SESSION_START_INFO_TAG.to_string(),
        metadata: Some(super::proto::SummaryMetadata {
            plugin_data: Some(super::proto::PluginData {
                plugin_name: "hparams".into(),
                content: prost::Message::encode_to_vec(&data),
            }),
        }),
        tensor: Some(TensorProto {
            dtype: 1,
            tensor_shape: Some(TensorShapeProto::default()),
            float_val: vec![0.0],
            ..TensorProto::default()
        }),
        ..SummaryValue::default()
    }
}
