//! `/{job}/shardcar`: job settings shardcar has beyond ElasticJob's `config`. Java never reads
//! this sibling node, so `config` keeps exactly ElasticJob's keys (old readers break on new
//! keys, UI#125). YAML with our own camel-case keys; unknown keys are ignored when read.

use serde::{Deserialize, Serialize};

use super::LayoutError;

/// shardcar's own per-job settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JobExtras {
    /// An item not answered within this many seconds fails (0: no limit).
    pub execution_timeout_seconds: u32,
}

impl JobExtras {
    /// The node's data.
    pub fn to_yaml(&self) -> String {
        format!(
            "executionTimeoutSeconds: {}\n",
            self.execution_timeout_seconds
        )
    }

    /// Reads the node's data; missing keys take their defaults.
    ///
    /// # Errors
    /// [`LayoutError::Yaml`] when the data is not a YAML mapping of known value types.
    pub fn from_yaml(data: &[u8]) -> Result<JobExtras, LayoutError> {
        if data.iter().all(u8::is_ascii_whitespace) {
            return Ok(JobExtras::default());
        }
        serde_yaml_ng::from_slice(data).map_err(|e| LayoutError::Yaml {
            node: "shardcar",
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_leniency() {
        let extras = JobExtras {
            execution_timeout_seconds: 30,
        };
        assert_eq!(extras.to_yaml(), "executionTimeoutSeconds: 30\n");
        assert_eq!(
            JobExtras::from_yaml(extras.to_yaml().as_bytes()).unwrap(),
            extras
        );
        assert_eq!(JobExtras::from_yaml(b"").unwrap(), JobExtras::default());
        assert_eq!(
            JobExtras::from_yaml(b"future: 1\n").unwrap(),
            JobExtras::default()
        );
        assert!(JobExtras::from_yaml(b"executionTimeoutSeconds: many\n").is_err());
    }
}
