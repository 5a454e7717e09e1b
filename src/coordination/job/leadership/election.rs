//! Leader election per job (`docs/elasticjob-compat.md` §4).
//!
//! ElasticJob elects by taking the `leader/election/latch` mutex and creating the ephemeral
//! `leader/election/instance` if it is absent. shardcar does the same, with the same
//! Curator-compatible latch children, so it can share a job with Java processes: the job's
//! state decides here and writes the node under the latch its driver takes. A sidecar
//! takes part with one identity per job: one of its live local instances (`docs/elasticjob-compat.md` §4).

use crate::coordination::job::mirror::JobView;

/// What a sidecar should do about leadership of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No leader and our server is available: run for election with this instance id.
    Elect(String),
    /// One of our instances leads (this one).
    Lead(String),
    /// We lead but our server was disabled: delete the leader node (this data version).
    Abdicate(i32),
    /// Someone else leads, or we cannot lead.
    Follow,
}

/// Decides from the view, the local instance ids (in order) and our server IP.
pub fn decide<'a>(
    view: &JobView,
    mut locals: impl Iterator<Item = &'a String> + Clone,
    ip: &str,
) -> Decision {
    let enabled = view.server_enabled(ip);
    match &view.leader {
        Some((id, version)) if locals.clone().any(|l| l == id) => {
            if enabled {
                Decision::Lead(id.clone())
            } else {
                Decision::Abdicate(*version)
            }
        }
        Some(_) => Decision::Follow,
        None if enabled => locals
            .next()
            .map_or(Decision::Follow, |id| Decision::Elect(id.clone())),
        None => Decision::Follow,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(leader: Option<&str>, servers: &[(&str, bool)]) -> JobView {
        JobView {
            leader: leader.map(|l| (l.to_string(), 0)),
            servers: servers.iter().map(|(ip, e)| (ip.to_string(), *e)).collect(),
            ..JobView::default()
        }
    }

    #[test]
    fn decisions() {
        let a = "10.0.0.1@-@1".to_string();
        let b = "10.0.0.1@-@2".to_string();
        let locals = [a.clone(), b.clone()];
        let ip = "10.0.0.1";
        let cases = [
            (view(None, &[(ip, true)]), Decision::Elect(a.clone())),
            (view(None, &[]), Decision::Elect(a.clone())),
            (view(None, &[(ip, false)]), Decision::Follow),
            (view(Some(&b), &[(ip, true)]), Decision::Lead(b.clone())),
            (view(Some(&a), &[(ip, false)]), Decision::Abdicate(0)),
            (view(Some("10.0.0.9@-@1"), &[(ip, true)]), Decision::Follow),
        ];
        for (v, expected) in cases {
            assert_eq!(
                decide(&v, locals.iter(), ip),
                expected,
                "leader {:?}",
                v.leader
            );
        }
        assert_eq!(decide(&view(None, &[]), [].iter(), ip), Decision::Follow);
    }
}
