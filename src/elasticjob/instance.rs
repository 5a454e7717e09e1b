//! Job instance identity (`docs/elasticjob-compat.md` §2.2–§2.3): the instance id `{ip}@-@{pid}`, the YAML data of
//! `instances/{id}`, and the task id ElasticJob builds for one execution.

use serde::Deserialize;

use super::yaml::{self, Text, Value};
use super::LayoutError;

/// The separator ElasticJob puts between the parts of instance ids and task ids.
pub const DELIMITER: &str = "@-@";

/// `{ip}@-@{pid}` — ElasticJob 3.x has no label suffix. Any text without `@-@` may stand for
/// the pid (a worker's `instance_suffix`).
pub fn instance_id(ip: &str, pid: impl std::fmt::Display) -> String {
    format!("{ip}{DELIMITER}{pid}")
}

/// The IP part of an instance id: the text before the first `@-@` (the whole id if none).
pub fn ip_of(id: &str) -> &str {
    id.split_once(DELIMITER).map_or(id, |(ip, _)| ip)
}

/// The part after the first `@-@` (the pid for ids ElasticJob makes); empty if none.
pub fn pid_part(id: &str) -> &str {
    id.split_once(DELIMITER).map_or("", |(_, pid)| pid)
}

/// The data of `instances/{id}`, exactly as Java writes it:
/// `jobInstanceId: {id}\nserverIp: {ip}\n` (values quoted as SnakeYAML quotes them).
pub fn instance_yaml(id: &str, server_ip: &str) -> String {
    yaml::dump_map(&[
        ("jobInstanceId", Value::Str(id)),
        ("serverIp", Value::Str(server_ip)),
    ])
}

/// The parsed data of `instances/{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    pub job_instance_id: String,
    pub server_ip: String,
    /// Always absent in ElasticJob-Lite.
    pub labels: Option<String>,
}

#[derive(Deserialize)]
struct RawInstance {
    #[serde(rename = "jobInstanceId")]
    job_instance_id: Option<Text>,
    #[serde(rename = "serverIp")]
    server_ip: Option<Text>,
    labels: Option<Text>,
}

/// Reads `instances/{id}` data leniently: unknown keys are ignored and a missing `serverIp` is
/// taken from the id.
///
/// # Errors
/// [`LayoutError::Yaml`] if the data is not a YAML mapping, [`LayoutError::MissingKey`] if it
/// has no `jobInstanceId`.
pub fn parse_instance_yaml(data: &[u8]) -> Result<InstanceInfo, LayoutError> {
    const NODE: &str = "instances/{id}";
    let raw: RawInstance = serde_yaml_ng::from_slice(data).map_err(|e| LayoutError::Yaml {
        node: NODE,
        message: e.to_string(),
    })?;
    let id = raw.job_instance_id.ok_or(LayoutError::MissingKey {
        node: NODE,
        key: "jobInstanceId",
    })?;
    let server_ip = raw
        .server_ip
        .map_or_else(|| ip_of(&id.0).to_owned(), |t| t.0);
    Ok(InstanceInfo {
        job_instance_id: id.0,
        server_ip,
        labels: raw.labels.map(|t| t.0),
    })
}

/// The task id of one execution (`docs/elasticjob-compat.md` §2.3):
/// `{job}@-@{items comma-joined}@-@READY@-@{ip}@-@{pid}`.
pub fn task_id(job: &str, items: &[i32], id: &str) -> String {
    let items: Vec<String> = items.iter().map(i32::to_string).collect();
    format!(
        "{job}{DELIMITER}{}{DELIMITER}READY{DELIMITER}{id}",
        items.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        let id = instance_id("10.0.0.5", 4242);
        assert_eq!(id, "10.0.0.5@-@4242");
        assert_eq!(ip_of(&id), "10.0.0.5");
        assert_eq!(pid_part(&id), "4242");
        assert_eq!(ip_of("no-delimiter"), "no-delimiter");
        assert_eq!(pid_part("no-delimiter"), "");
        assert_eq!(ip_of("1.2.3.4@-@5@-@x"), "1.2.3.4");
        assert_eq!(pid_part("1.2.3.4@-@5@-@x"), "5@-@x");
    }

    #[test]
    fn yaml_matches_java() {
        assert_eq!(
            instance_yaml("10.0.0.5@-@4242", "10.0.0.5"),
            "jobInstanceId: 10.0.0.5@-@4242\nserverIp: 10.0.0.5\n"
        );
        // A value SnakeYAML would read as something else gets quoted.
        assert_eq!(
            instance_yaml("1@-@2", "1.5"),
            "jobInstanceId: 1@-@2\nserverIp: '1.5'\n"
        );
    }

    #[test]
    fn parse_is_lenient() {
        let info =
            parse_instance_yaml(b"jobInstanceId: 10.0.0.5@-@4242\nserverIp: 10.0.0.5\n").unwrap();
        assert_eq!(
            info,
            InstanceInfo {
                job_instance_id: "10.0.0.5@-@4242".into(),
                server_ip: "10.0.0.5".into(),
                labels: None
            }
        );
        let info =
            parse_instance_yaml(b"jobInstanceId: 1.2.3.4@-@7\nlabels: x\nextra: 1\n").unwrap();
        assert_eq!(info.server_ip, "1.2.3.4");
        assert_eq!(info.labels.as_deref(), Some("x"));
        let quoted = parse_instance_yaml(b"jobInstanceId: a@-@1\nserverIp: '1.5'\n").unwrap();
        assert_eq!(quoted.server_ip, "1.5");
        assert!(matches!(
            parse_instance_yaml(b"serverIp: 1.2.3.4\n"),
            Err(LayoutError::MissingKey {
                key: "jobInstanceId",
                ..
            })
        ));
        assert!(matches!(
            parse_instance_yaml(b"- a\n- b\n"),
            Err(LayoutError::Yaml { .. })
        ));
    }

    #[test]
    fn every_vector_instance_round_trips() {
        for (file, node) in crate::elasticjob::vectors::all_nodes() {
            if !node.path.contains("/instances/") {
                continue;
            }
            let id = node.path.rsplit('/').next().unwrap();
            let info = parse_instance_yaml(node.data.as_bytes()).unwrap();
            assert_eq!(info.job_instance_id, id, "{file}");
            assert_eq!(
                instance_yaml(id, ip_of(id)),
                node.data,
                "{file} {}",
                node.path
            );
            assert!(node.ephemeral, "{file}: instances are ephemeral");
        }
    }

    #[test]
    fn task_ids() {
        assert_eq!(
            task_id("demoJob", &[0, 1, 6], "10.0.0.1@-@9"),
            "demoJob@-@0,1,6@-@READY@-@10.0.0.1@-@9"
        );
        assert_eq!(task_id("j", &[], "ip@-@1"), "j@-@@-@READY@-@ip@-@1");
    }
}
