//! `ctl --json`: a response as canonical proto3 JSON, the mapping every gRPC tool uses (what
//! grpcurl prints for the same call): lowerCamelCase field names, enums by name, 64-bit
//! integers as strings, `Timestamp` and `Duration` as RFC 3339 text and `"1.5s"`, fields at
//! their default left out. Done by reflection over the compiled descriptor set, so it follows
//! the proto as it changes.

use std::sync::LazyLock;

use prost::{Message, Name};
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(crate::proto::FILE_DESCRIPTOR_SET)
        .expect("the compiled descriptor set of shardcar.v1 decodes")
});

/// `message` as canonical proto3 JSON; pretty (indented) or on one line.
pub fn to_json<M: Message + Name>(message: &M, pretty: bool) -> String {
    let full_name = M::full_name();
    let descriptor = POOL
        .get_message_by_name(&full_name)
        .unwrap_or_else(|| panic!("{full_name} is in the compiled descriptor set"));
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .expect("a message re-reads as its own type");
    let options = SerializeOptions::new();
    let mut out = Vec::new();
    let result = if pretty {
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"  ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
        dynamic.serialize_with_options(&mut serializer, &options)
    } else {
        let mut serializer = serde_json::Serializer::new(&mut out);
        dynamic.serialize_with_options(&mut serializer, &options)
    };
    result.expect("a dynamic message serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;

    #[test]
    fn canonical_names_enums_int64_timestamps_and_no_defaults() {
        let response = proto::ListExecutionsResponse {
            executions: vec![proto::ExecutionInfo {
                job_name: "billing".into(),
                execution_id: "e1".into(),
                source: proto::TriggerSource::Failover as i32,
                items: vec![0, 2],
                started_at: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 0,
                }),
                duration: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000,
                }),
                ..Default::default()
            }],
        };
        let v: serde_json::Value = serde_json::from_str(&to_json(&response, true)).unwrap();
        let e = &v["executions"][0];
        assert_eq!(e["jobName"], "billing");
        assert_eq!(e["executionId"], "e1");
        assert_eq!(e["source"], "TRIGGER_SOURCE_FAILOVER");
        assert_eq!(e["items"], serde_json::json!([0, 2]));
        assert_eq!(e["startedAt"], "2023-11-14T22:13:20Z");
        assert_eq!(e["duration"], "1.500s");
        assert!(e.get("error").is_none(), "defaults are left out: {e}");
        let line = to_json(&response, false);
        assert!(!line.contains('\n'));
    }
}
