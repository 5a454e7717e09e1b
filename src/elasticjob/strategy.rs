//! ElasticJob's sharding strategies (`docs/elasticjob-compat.md` §5) as pure functions: given the available
//! instances in ElasticJob's descending order and the item count, who owns which item.
//!
//! The same inputs give the same owners as a Java leader, so a shardcar leader and a Java
//! leader agree on every assignment.

use std::fmt;
use std::str::FromStr;

use crate::elasticjob::java_string_hash;

/// A sharding strategy shardcar implements (ElasticJob's names in [`StrategyType::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StrategyType {
    /// `AVG_ALLOCATION`, ElasticJob's default.
    #[default]
    AvgAllocation,
    /// `ODEVITY`: reverse the instances when the job name's hash is even.
    Odevity,
    /// `ROUND_ROBIN`: rotate the instances by the job name's hash.
    RoundRobin,
}

/// `jobShardingStrategyType` names a strategy shardcar does not implement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sharding strategy {0:?}: shardcar supports AVG_ALLOCATION, ODEVITY and ROUND_ROBIN"
)]
pub struct UnknownStrategy(pub String);

impl StrategyType {
    /// Parses ElasticJob's name (`AVG_ALLOCATION`, `ODEVITY`, `ROUND_ROBIN`; exact case).
    ///
    /// # Errors
    /// [`UnknownStrategy`] for any other name, including `SINGLE_SHARDING_BALANCE` (3.0.5+),
    /// which depends on the wall clock and is not supported.
    pub fn parse(name: &str) -> Result<Self, UnknownStrategy> {
        match name {
            "AVG_ALLOCATION" => Ok(StrategyType::AvgAllocation),
            "ODEVITY" => Ok(StrategyType::Odevity),
            "ROUND_ROBIN" => Ok(StrategyType::RoundRobin),
            other => Err(UnknownStrategy(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StrategyType::AvgAllocation => "AVG_ALLOCATION",
            StrategyType::Odevity => "ODEVITY",
            StrategyType::RoundRobin => "ROUND_ROBIN",
        }
    }
}

impl FromStr for StrategyType {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StrategyType::parse(s)
    }
}

impl fmt::Display for StrategyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Assigns items `0..total` to `instances_desc` (instance ids already sorted descending, as
/// ElasticJob's `getChildrenKeys` returns them).
///
/// The result lists every instance once, in the strategy's order, with its items ascending
/// (possibly none). Empty input gives an empty result; `total <= 0` gives every instance no
/// items.
///
/// One deliberate difference: for ROUND_ROBIN, a job name whose hash is `Integer.MIN_VALUE`
/// makes Java compute a negative offset, and Java then fails with an index error unless the
/// instance count divides 2³¹. shardcar uses the offset's non-negative remainder instead, which
/// equals Java's result in every case where Java succeeds.
pub fn shard(
    strategy: StrategyType,
    job_name: &str,
    instances_desc: &[String],
    total: i32,
) -> Vec<(String, Vec<i32>)> {
    let n = instances_desc.len();
    if n == 0 {
        return Vec::new();
    }
    let ordered: Vec<&String> = match strategy {
        StrategyType::AvgAllocation => instances_desc.iter().collect(),
        StrategyType::Odevity => {
            if java_string_hash(job_name) % 2 == 0 {
                instances_desc.iter().rev().collect()
            } else {
                instances_desc.iter().collect()
            }
        }
        StrategyType::RoundRobin => {
            // Java: Math.abs(hash) % n, where abs(MIN_VALUE) stays negative.
            let offset = java_string_hash(job_name).wrapping_abs() as i64 % n as i64;
            (0..n)
                .map(|i| &instances_desc[(i as i64 + offset).rem_euclid(n as i64) as usize])
                .collect()
        }
    };
    average(&ordered, total)
}

/// AVG_ALLOCATION over instances in the given order.
fn average(ordered: &[&String], total: i32) -> Vec<(String, Vec<i32>)> {
    let n = ordered.len() as i32;
    let total = total.max(0);
    let per = total / n;
    let remainder = total % n;
    ordered
        .iter()
        .zip(0..)
        .map(|(id, k)| {
            let mut items: Vec<i32> = (k * per..(k + 1) * per).collect();
            if k < remainder {
                items.push(per * n + k);
            }
            ((*id).clone(), items)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elasticjob::sort_descending;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(s: StrategyType, job: &str, inst: &[&str], total: i32) -> Vec<(String, Vec<i32>)> {
        shard(s, job, &ids(inst), total)
    }

    fn expect(pairs: &[(&str, &[i32])]) -> Vec<(String, Vec<i32>)> {
        pairs
            .iter()
            .map(|(id, items)| (id.to_string(), items.to_vec()))
            .collect()
    }

    // A, B, C as in ElasticJob's worked example; they arrive descending: [C, B, A].
    const A: &str = "10.0.0.1@-@1";
    const B: &str = "10.0.0.2@-@1";
    const C: &str = "10.0.0.3@-@1";
    const DESC: [&str; 3] = [C, B, A];

    #[test]
    fn names() {
        for s in [
            StrategyType::AvgAllocation,
            StrategyType::Odevity,
            StrategyType::RoundRobin,
        ] {
            assert_eq!(StrategyType::parse(s.as_str()), Ok(s));
            assert_eq!(s.as_str().parse::<StrategyType>(), Ok(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(StrategyType::default(), StrategyType::AvgAllocation);
        let err = StrategyType::parse("SINGLE_SHARDING_BALANCE").unwrap_err();
        assert!(err.to_string().contains("SINGLE_SHARDING_BALANCE"), "{err}");
        assert!(StrategyType::parse("avg_allocation").is_err());
    }

    #[test]
    fn average_allocation_examples() {
        let avg = StrategyType::AvgAllocation;
        assert!(run(avg, "j", &[], 3).is_empty());
        assert_eq!(run(avg, "j", &["x"], 3), expect(&[("x", &[0, 1, 2])]));
        assert_eq!(
            run(avg, "j", &DESC, 2),
            expect(&[(C, &[0]), (B, &[1]), (A, &[])])
        );
        assert_eq!(
            run(avg, "j", &DESC, 8),
            expect(&[(C, &[0, 1, 6]), (B, &[2, 3, 7]), (A, &[4, 5])])
        );
        assert_eq!(
            run(avg, "j", &DESC, 9),
            expect(&[(C, &[0, 1, 2]), (B, &[3, 4, 5]), (A, &[6, 7, 8])])
        );
        assert_eq!(
            run(avg, "j", &DESC, 10),
            expect(&[(C, &[0, 1, 2, 9]), (B, &[3, 4, 5]), (A, &[6, 7, 8])])
        );
        assert_eq!(
            run(avg, "j", &DESC, 0),
            expect(&[(C, &[]), (B, &[]), (A, &[])])
        );
        assert_eq!(
            run(avg, "j", &DESC, -4),
            expect(&[(C, &[]), (B, &[]), (A, &[])])
        );
    }

    #[test]
    fn odevity_examples() {
        let odd = StrategyType::Odevity;
        // demoJob: hash even -> reversed to [A, B, C].
        assert_eq!(
            run(odd, "demoJob", &DESC, 2),
            expect(&[(A, &[0]), (B, &[1]), (C, &[])])
        );
        // orderJob: hash odd -> kept as [C, B, A].
        assert_eq!(
            run(odd, "orderJob", &DESC, 2),
            expect(&[(C, &[0]), (B, &[1]), (A, &[])])
        );
        // ElasticJob's own test: job "1" (hash 49, odd) keeps the order, "0" (48) reverses it.
        let three = ["host0@-@0", "host1@-@0", "host2@-@0"];
        assert_eq!(
            run(odd, "1", &three, 2),
            expect(&[("host0@-@0", &[0]), ("host1@-@0", &[1]), ("host2@-@0", &[])])
        );
        assert_eq!(
            run(odd, "0", &three, 2),
            expect(&[("host2@-@0", &[0]), ("host1@-@0", &[1]), ("host0@-@0", &[])])
        );
        // A negative even hash also reverses.
        assert!(java_string_hash("polygenelubricants") % 2 == 0);
        assert_eq!(run(odd, "polygenelubricants", &DESC, 1)[0].0, A);
    }

    #[test]
    fn round_robin_examples() {
        let rr = StrategyType::RoundRobin;
        let three = ["host0@-@0", "host1@-@0", "host2@-@0"];
        // ElasticJob's test: "1" (49 % 3 = 1), "2" (50 % 3 = 2), "3" (51 % 3 = 0).
        assert_eq!(
            run(rr, "1", &three, 3),
            expect(&[
                ("host1@-@0", &[0]),
                ("host2@-@0", &[1]),
                ("host0@-@0", &[2])
            ])
        );
        assert_eq!(
            run(rr, "2", &three, 3),
            expect(&[
                ("host2@-@0", &[0]),
                ("host0@-@0", &[1]),
                ("host1@-@0", &[2])
            ])
        );
        assert_eq!(
            run(rr, "3", &three, 3),
            expect(&[
                ("host0@-@0", &[0]),
                ("host1@-@0", &[1]),
                ("host2@-@0", &[2])
            ])
        );
        // orderJob, offset 1: [C, B, A] -> [B, A, C]; T=5 -> B[0,3] A[1,4] C[2].
        assert_eq!(
            run(rr, "orderJob", &DESC, 5),
            expect(&[(B, &[0, 3]), (A, &[1, 4]), (C, &[2])])
        );
    }

    #[test]
    fn round_robin_with_min_value_hash() {
        let rr = StrategyType::RoundRobin;
        // abs(MIN_VALUE) % 2 == 0 in Java too: no rotation.
        assert_eq!(
            run(rr, "polygenelubricants", &[B, A], 2),
            expect(&[(B, &[0]), (A, &[1])])
        );
        // Java's offset is MIN_VALUE % 3 = -2 (and Java then throws); -2 ≡ 1 (mod 3).
        assert_eq!(
            run(rr, "polygenelubricants", &DESC, 3),
            expect(&[(B, &[0]), (A, &[1]), (C, &[2])])
        );
    }

    #[test]
    fn every_vector_assignment_is_reproduced() {
        let dumps = crate::elasticjob::vectors::all_dumps();
        assert!(dumps.len() >= 10);
        for d in dumps {
            let root = format!("/{}", d.job);
            let mut instances = d.children(&format!("{root}/instances"));
            if d.file.ends_with("#during_failover") {
                // The killed instance owned items 2 and 3 at the last reshard; the next one
                // (flagged by `necessary`) has not happened yet.
                instances.push("192.0.2.2@-@1001".to_owned());
            }
            sort_descending(&mut instances);
            let strategy = d
                .strategy
                .as_deref()
                .map_or(StrategyType::AvgAllocation, |s| {
                    StrategyType::parse(s).unwrap()
                });
            let mut want: Vec<(i32, String)> = Vec::new();
            for item in d.children(&format!("{root}/sharding")) {
                let owner = d
                    .data(&format!("{root}/sharding/{item}/instance"))
                    .unwrap_or_else(|| panic!("{}: item {item} has no owner", d.file));
                want.push((item.parse().unwrap(), owner.to_owned()));
            }
            want.sort();
            assert_eq!(want.len() as i32, d.total, "{}", d.file);
            let mut got: Vec<(i32, String)> = shard(strategy, &d.job, &instances, d.total)
                .into_iter()
                .flat_map(|(id, items)| items.into_iter().map(move |i| (i, id.clone())))
                .collect();
            got.sort();
            assert_eq!(got, want, "{}", d.file);
        }
    }
}
